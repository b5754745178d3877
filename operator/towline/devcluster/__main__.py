"""`python -m towline.devcluster up|down|env`: the same as `towline dev cluster ...`."""

import sys

from towline.devcluster.cli import cluster_main

sys.exit(cluster_main(sys.argv[1:]))
