import sys

from shadowsim.cli import main

sys.exit(main())
