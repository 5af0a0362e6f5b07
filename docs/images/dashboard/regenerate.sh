#!/bin/sh
# Regenerates the screenshots of docs/dashboard.md: the dashboard's browser tests (headless
# Chromium, `apt-get install -y chromium chromium-driver`) save each page they check here.
set -e
cd "$(dirname "$0")/../../.."
RATCHET_DASHBOARD_SCREENSHOTS=docs/images/dashboard .venv/bin/pytest -q -p no:randomly \
  tests/dashboard/test_dashboard_browser.py tests/dashboard/test_dashboard_operator_browser.py \
  tests/dashboard/test_dashboard_schedule_misfires.py
