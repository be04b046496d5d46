import sys

from meshplan.cli import main

sys.exit(main())
