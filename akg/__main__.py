import sys

from akg.cli import main

sys.exit(main())
