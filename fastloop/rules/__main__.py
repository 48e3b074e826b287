"""``python -m fastloop.rules``: print the path of the Prometheus rules file."""

from fastloop.rules import PROMETHEUS

print(PROMETHEUS)
