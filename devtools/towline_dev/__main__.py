"""`python -m towline_dev [cluster up|down|env]`: the same as the `towline-dev` command."""

import sys

from towline_dev.devenv import dev_main

sys.exit(dev_main(sys.argv[1:]))
