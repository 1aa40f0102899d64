import sys

from specscope.launcher import main

sys.exit(main())
