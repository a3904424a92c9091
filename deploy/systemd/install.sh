#!/usr/bin/env bash
# Install the inferwatch agent and its weekly report as systemd services on a
# bare GPU VM. Idempotent: run it again to upgrade; it never overwrites your
# configuration.
#
#   sudo deploy/systemd/install.sh              install, enable, (re)start
#   sudo deploy/systemd/install.sh --no-start   install and enable only
#
# What it does:
#   1. a virtual environment in $INFERWATCH_PREFIX (default /opt/inferwatch),
#      into which pip installs $INFERWATCH_SPEC (default: this checkout when
#      run from one, else the "inferwatch" package), with the report extra;
#   2. /etc/inferwatch/config.yaml, report.env and smtp-password, only if absent;
#   3. the unit files into /etc/systemd/system, then daemon-reload, enable and
#      (unless --no-start) restart the agent and start the report timer;
#   4. prints the commands that verify the installation.
#
# Environment (all optional): INFERWATCH_PREFIX, INFERWATCH_SPEC, PYTHON
# (interpreter for the venv, >= 3.10), INFERWATCH_PIP_ARGS (extra pip
# arguments, e.g. an index URL), INFERWATCH_VENV_ARGS (extra venv arguments),
# INFERWATCH_ETC (default /etc/inferwatch) and INFERWATCH_UNIT_DIR (default
# /etc/systemd/system). --no-systemctl skips every systemctl call (image
# builds, staging, tests).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prefix=${INFERWATCH_PREFIX:-/opt/inferwatch}
etc=${INFERWATCH_ETC:-/etc/inferwatch}
unit_dir=${INFERWATCH_UNIT_DIR:-/etc/systemd/system}
python=${PYTHON:-python3}
# The agent and the weekly report's extra (both units run from this venv).
if [[ -z "${INFERWATCH_SPEC:-}" && -f "$here/../../pyproject.toml" ]]; then
  spec="$(cd "$here/../.." && pwd)[report]"
else
  spec=${INFERWATCH_SPEC:-"inferwatch[report]"}
fi
read -r -a pip_args <<<"${INFERWATCH_PIP_ARGS:-}"
read -r -a venv_args <<<"${INFERWATCH_VENV_ARGS:-}"

start=yes
use_systemctl=yes
for arg in "$@"; do
  case "$arg" in
    --no-start) start=no ;;
    --no-systemctl) use_systemctl=no; start=no ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

say() { printf '==> %s\n' "$*"; }
die() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }

if [[ $use_systemctl == yes && $(id -u) -ne 0 ]]; then
  die "run as root (sudo), or pass --no-systemctl to stage files only"
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "$python is older than 3.10; set PYTHON to a newer interpreter"

# 1. virtual environment + package
if [[ ! -x "$prefix/bin/python" ]]; then
  say "creating the virtual environment $prefix"
  "$python" -m venv "${venv_args[@]}" "$prefix"
fi
say "installing $spec into $prefix"
"$prefix/bin/python" -m pip install --quiet --upgrade "${pip_args[@]}" "$spec"
"$prefix/bin/inferwatch" --version

# 2. configuration, never overwritten
install -d -m 0755 "$etc"
install -m 0644 "$here/config.example.yaml" "$etc/config.example.yaml"
if [[ -e "$etc/config.yaml" ]]; then
  say "keeping $etc/config.yaml"
else
  say "writing $etc/config.yaml (edit the workers: section)"
  install -m 0644 "$here/config.example.yaml" "$etc/config.yaml"
fi
if [[ ! -e "$etc/report.env" ]]; then
  say "writing $etc/report.env (edit the SMTP settings)"
  install -m 0600 "$here/report.env.example" "$etc/report.env"
fi
if [[ ! -e "$etc/smtp-password" ]]; then
  say "creating an empty $etc/smtp-password (put the SMTP password in it)"
  install -m 0600 /dev/null "$etc/smtp-password"
fi

# 3. unit files, with the paths of this installation
install -d -m 0755 "$unit_dir"
changed=no
for unit in inferwatch.service inferwatch-report.service inferwatch-report.timer; do
  rendered=$(sed -e "s|/opt/inferwatch/|$prefix/|g" -e "s|/etc/inferwatch/|$etc/|g" "$here/$unit")
  if [[ -f "$unit_dir/$unit" ]] && [[ "$(cat "$unit_dir/$unit")" == "$rendered" ]]; then
    continue
  fi
  say "installing $unit_dir/$unit"
  printf '%s\n' "$rendered" >"$unit_dir/$unit.tmp"
  chmod 0644 "$unit_dir/$unit.tmp"
  mv "$unit_dir/$unit.tmp" "$unit_dir/$unit"
  changed=yes
done

if [[ $use_systemctl == yes ]]; then
  if [[ $changed == yes ]]; then
    systemctl daemon-reload
  fi
  systemctl enable inferwatch.service inferwatch-report.timer
  if [[ $start == yes ]]; then
    systemctl restart inferwatch.service
    systemctl start inferwatch-report.timer
  fi
fi

# 4. how to check
cat <<VERIFY

inferwatch is installed. Verify:
  systemctl status inferwatch.service
  curl -fsS http://127.0.0.1:10127/healthz
  curl -fsS http://127.0.0.1:10127/readyz
  curl -fsS http://127.0.0.1:10127/metrics | grep -E '^inferwatch_(gpu_up|target_up)'
  systemctl list-timers inferwatch-report.timer
  systemd-analyze security inferwatch.service
Then add this VM to Prometheus (docs/deploy.md, "Bare VM") and run the report
once by hand: systemctl start inferwatch-report.service
VERIFY
