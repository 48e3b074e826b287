import sys

from fastloop.cli import main

sys.exit(main())
