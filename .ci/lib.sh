# Shared by the .ci scripts (sourced, not run): installing what a test peer needs on a fresh
# Debian machine, as root, into ignored local prefixes; nothing is installed globally except
# Debian packages.

CI_APT_UPDATED=""
# Installs Debian packages, running `apt-get update` once per script.
apt_install() {
  if [ -z "$CI_APT_UPDATED" ]; then apt-get update -qq; CI_APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

CI_VENV=.ci/.venv
# Makes .ci/.venv hold exactly .ci/requirements.txt: when the requirements the venv was built
# from (a copy kept inside it) differ, it is rebuilt from scratch, so a changed pin never meets
# a stale one. Python 3.11 when the machine has it; Debian's python3-venv when ensurepip is absent.
ci_venv() {
  if cmp -s .ci/requirements.txt "$CI_VENV/requirements.txt" && [ -x "$CI_VENV/bin/python" ]; then
    return 0
  fi
  echo "ci: installing .ci/requirements.txt into $CI_VENV"
  rm -rf "$CI_VENV"
  local python
  python="$(command -v python3.11 || command -v python3)"
  if ! "$python" -m venv "$CI_VENV" 2>/dev/null; then
    rm -rf "$CI_VENV"
    apt_install python3-venv
    "$python" -m venv "$CI_VENV"
  fi
  "$CI_VENV/bin/pip" install -q --disable-pip-version-check -r .ci/requirements.txt
  "$CI_VENV/bin/pip" check
  cp .ci/requirements.txt "$CI_VENV/requirements.txt"
}
