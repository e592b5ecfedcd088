import sys

from qsim_tc.cli import main

sys.exit(main())
