"""The measurement: the one owner of every derived number, its statistics, cost model and k policies (torch-free)."""
