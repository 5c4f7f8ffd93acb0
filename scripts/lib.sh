# Shared shell helpers for the build and run scripts. Source it; do not run it.
#
# Conventions every script follows:
#   - `step "what"` prints one progress line per step (what users watch in `make images`);
#   - slow artefacts live under $CACHE_DIR, in a folder named after a hash of their exact
#     inputs (see `input_hash`), and are published atomically (build in *.tmp, then mv);
#   - everything downloaded from Debian goes through a *private* apt configuration
#     (`papt`), so the host's sources and dpkg database are never touched.

set -euo pipefail
# Called from `make`, the scripts would inherit its flags: -w makes inner makes print
# "Entering directory" into output that scripts capture (`make -s kernelrelease`).
unset MAKEFLAGS MFLAGS MAKELEVEL

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ism-emu}"
BUILD_DIR="${BUILD_DIR:-$REPO_ROOT/build}"
# Debian's archive; override with DEBIAN_MIRROR to use a local mirror.
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Fallback copies of source packages the archive may have dropped (see shared/mirror/README.md).
SHARED_MIRROR="${SHARED_MIRROR:-$REPO_ROOT/../shared/mirror/debian}"

step() { printf '==> [%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# input_hash FILE|DIR|STRING... -> 16 hex digits over the contents of files (sorted walk of
# directories) and the literal text of the other arguments.
input_hash() {
    local arg
    for arg in "$@"; do
        if [ -d "$arg" ]; then
            (cd "$arg" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum)
        elif [ -f "$arg" ]; then
            sha256sum <"$arg"
        else
            printf '%s\n' "$arg"
        fi
    done | sha256sum | cut -c1-16
}

# Host packages from the host's own (Debian 12) sources; installs only what is missing.
need_host_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    step "installing host packages: ${missing[*]}"
    if [ ! -f "$CACHE_DIR/.host-apt-updated" ] || [ -n "$(find "$CACHE_DIR/.host-apt-updated" -mmin +1440)" ]; then
        apt-get update -qq >&2 || die "apt-get update failed"
        mkdir -p "$CACHE_DIR" && touch "$CACHE_DIR/.host-apt-updated"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
        || die "could not install host packages: ${missing[*]}"
}

# papt SUITE ARCH apt-get-args...
# Runs apt-get against a private configuration for Debian SUITE (bookworm, trixie, sid, ...)
# and architecture ARCH, with its own lists, cache and an empty dpkg status. Nothing of the
# host's apt or dpkg state is read or written. Index files are refreshed once a day.
papt_dir() { printf '%s/apt/%s-%s' "$CACHE_DIR" "$1" "$2"; }
papt() {
    local suite="$1" arch="$2"; shift 2
    local dir; dir="$(papt_dir "$suite" "$arch")"
    if [ ! -f "$dir/apt.conf" ]; then
        mkdir -p "$dir"/{lists/partial,cache/archives/partial,etc/preferences.d,etc/apt.conf.d}
        : >"$dir/status"
        cat >"$dir/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR $suite main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR $suite main
SRC
        cat >"$dir/apt.conf" <<CONF
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
Dir::State "$dir";
Dir::State::Lists "$dir/lists";
Dir::State::status "$dir/status";
Dir::Cache "$dir/cache";
Dir::Etc::SourceList "$dir/sources.list";
Dir::Etc::SourceParts "/nonexistent";
Dir::Etc::Preferences "$dir/etc/preferences";
Dir::Etc::PreferencesParts "$dir/etc/preferences.d";
Dir::Etc::Parts "$dir/etc/apt.conf.d";
Acquire::Languages "none";
APT::Sandbox::User "root";
CONF
        # sid's Release file is sometimes past its Valid-Until on mirrors; the archive
        # signature is still checked.
        if [ "$suite" = sid ]; then
            echo 'Acquire::Check-Valid-Until "false";' >"$dir/etc/apt.conf.d/50valid-until"
        fi
    fi
    if [ ! -f "$dir/updated" ] || [ -n "$(find "$dir/updated" -mmin +1440)" ]; then
        step "refreshing private apt index: Debian $suite ($arch)"
        # --error-on=any: a failed index download is an error, not a warning, so an
        # unreachable archive is never marked fresh.
        APT_CONFIG="$dir/apt.conf" apt-get -qq --error-on=any update >&2 \
            || die "apt-get update for Debian $suite ($arch) failed (archive unreachable or mid-sync?); try again later"
        touch "$dir/updated"
    fi
    APT_CONFIG="$dir/apt.conf" apt-get "$@"
}
