"""The engine in a process of its own: ``specscope serve`` and the clients of its event stream (no Qt here).

- ``url``: ``specscope://HOST:PORT/?token=…`` parsed and formatted (the token kept out of logs).
- ``protocol``: JSON lines with bounds; message builders; events as the event log writes them.
- ``server``: the worker (one pair, one client at a time, a session per start).
- ``client``: connect, start runs, iterate their events (the caller feeds them to a ``core.measure.run.Run``),
  send controls from any thread.
- ``spawn``: a local worker process for the app's own runs, tied to its spawner's life.
- ``parent``: the worker's side of that tie (``serve --exit-with-parent``: stop when stdin closes).
- ``options``: the session options a start may carry, checked.
(The CLI's ``serve`` and ``run --remote`` are ``core.commands.serve``.)
"""
