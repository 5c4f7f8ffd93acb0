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
# The project's defaults (kernel line, variant, CHID): one place, scripts/config.sh.
source "$REPO_ROOT/scripts/config.sh"
CACHE_DIR="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ism-emu}"
BUILD_DIR="${BUILD_DIR:-$REPO_ROOT/build}"
# Debian's archive: by default the one the host's apt is configured with (see
# debian_mirror); set DEBIAN_MIRROR to use another.
DEBIAN_MIRROR="${DEBIAN_MIRROR:-}"
# Fallback copies of source packages the archive may have dropped (see shared/mirror/README.md).
SHARED_MIRROR="${SHARED_MIRROR:-$REPO_ROOT/../shared/mirror/debian}"
# What package installs and downloads print goes here, not to the console.
SETUP_LOG="${SETUP_LOG:-$BUILD_DIR/logs/setup.log}"

# ismcheck MODULE ARGS...: one of the suite's checkers (tests/ismcheck/, a Python package:
# check_e2e, check_topology, reuse_verdict, kernel_reports, guest_where, wait_stream,
# results, check_links), as a command line.
ismcheck() {
    local module="$1"
    shift
    PYTHONPATH="$REPO_ROOT/tests${PYTHONPATH:+:$PYTHONPATH}" python3 -m "ismcheck.$module" "$@"
}

# The clock is UTC, as in the emulator's log, marked Z: [21:04:05Z].
step() { printf '==> [%s] %s\n' "$(date -u +%H:%M:%SZ)" "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Command lines. Every script a user calls answers -h/--help with its usage on stdout
# (exit 0) and refuses a wrong invocation with exit 2 before it does anything.
# script_usage [FILE]: FILE's header comment (default: the running script), from its
# second line to the first line that is not a comment, without the leading '# '.
# shellcheck disable=SC2120
script_usage() {
    awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${1:-$0}"
}
# usage_error MESSAGE: the message and where the usage is, on stderr; exit 2.
usage_error() {
    printf 'error: %s (usage: %s --help)\n' "$*" "${0#"$REPO_ROOT"/}" >&2
    exit 2
}
# help_and_no_options "$@": for scripts whose arguments are names, not options:
# -h/--help prints the usage and exits 0, any other word that starts with '-' is a
# usage error.
help_and_no_options() {
    local a
    for a in "$@"; do
        case "$a" in
            -h|--help) script_usage; exit 0 ;;
            -*) usage_error "unknown option $a" ;;
        esac
    done
}
# no_arguments "$@": for scripts that take no arguments (their settings come from the
# environment): --help as above, anything else a usage error.
no_arguments() {
    help_and_no_options "$@"
    [ $# -eq 0 ] || usage_error "no arguments expected, got: $*"
}
# one_of WHAT WORD ALLOWED...: a usage error unless WORD is one of ALLOWED.
one_of() {
    local what="$1" word="$2" a; shift 2
    for a in "$@"; do [ "$word" = "$a" ] && return 0; done
    usage_error "unknown $what '$word' (known: $*)"
}

# logged [--try] WHAT CMD...: runs CMD with its output appended to $SETUP_LOG. On failure
# the last lines of that output are shown (not with --try: a failure the caller handles
# and explains itself), and CMD's status is returned.
logged() {
    local quiet=0 what rc=0 mark
    [ "$1" = --try ] && { quiet=1; shift; }
    what="$1"; shift
    mkdir -p "$(dirname "$SETUP_LOG")"
    printf '\n### [%s] %s: %s\n' "$(date -u '+%F %TZ')" "$what" "$*" >>"$SETUP_LOG"
    mark="$(wc -l <"$SETUP_LOG")"
    "$@" >>"$SETUP_LOG" 2>&1 </dev/null || rc=$?
    if [ "$rc" -ne 0 ] && [ "$quiet" = 0 ]; then
        printf 'error: %s failed (status %s); its last lines (whole log: %s):\n' "$what" "$rc" "$SETUP_LOG" >&2
        tail -n +"$((mark + 1))" "$SETUP_LOG" | tail -n 25 | sed 's/^/  | /' >&2
    fi
    return "$rc"
}

# build_emulator: target/release/ism-emu (make emulator). When its sources changed, says
# so and shows cargo's progress; when nothing changed, cargo runs quietly (its errors
# and warnings still show, only the "Finished" line goes).
build_emulator() {
    local bin="$REPO_ROOT/target/release/ism-emu" newer=""
    [ -x "$bin" ] && newer="$(find "$REPO_ROOT/device/src" "$REPO_ROOT/device/Cargo.toml" \
        "$REPO_ROOT/Cargo.toml" "$REPO_ROOT/Cargo.lock" -newer "$bin" -type f -print -quit)"
    if [ -x "$bin" ] && [ -z "$newer" ]; then
        (cd "$REPO_ROOT" && cargo build --release --locked --quiet)
    else
        step "building the emulator: cargo build --release"
        (cd "$REPO_ROOT" && cargo build --release --locked)
    fi
}

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

# wait_for_socket PATH SECONDS [PID]: 0 once a unix socket exists at PATH; 1 after
# SECONDS, or as soon as process PID (the one that should create it) has exited.
wait_for_socket() {
    local path="$1" tenths=$(($2 * 10)) pid="${3:-}" i
    for ((i = 0; i < tenths; i++)); do
        [ -S "$path" ] && return 0
        [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    [ -S "$path" ]
}

# decompress_ko SRC DEST: a kernel module as the kernel installed it (.ko, .ko.xz,
# .ko.zst or .ko.gz) into the plain .ko DEST (busybox insmod reads no compressed modules).
decompress_ko() {
    case "$1" in
        *.xz) xz -dc "$1" >"$2" ;;
        *.zst) zstd -qdc "$1" >"$2" ;;
        *.gz) gzip -dc "$1" >"$2" ;;
        *) cp "$1" "$2" ;;
    esac
}

# host_codename: the host's Debian release (bookworm on a Debian 12 machine).
host_codename() {
    local codename
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    [ -n "$codename" ] || die "/etc/os-release names no release"
    printf '%s\n' "$codename"
}

# host_debian_sources: one "deb URL SUITE main" line for each of the host release's own
# suite, -updates and -security, as the host's apt names them (nothing is downloaded).
host_debian_sources() {
    local codename
    codename="$(host_codename)"
    apt-get update --print-uris 2>/dev/null \
        | sed -nE "s#^'(.*)/dists/($codename(-updates|-security)?)/InRelease'.*#deb \\1 \\2 main#p"
}

# debian_mirror: the base URL of Debian's main archive as the host's apt is configured
# (the source of the host release's own suite), or $DEBIAN_MIRROR when that is set.
debian_mirror() {
    if [ -z "$DEBIAN_MIRROR" ]; then
        local codename
        codename="$(host_codename)"
        DEBIAN_MIRROR="$(host_debian_sources | awk -v s="$codename" '$3 == s { print $2; exit }')"
        [ -n "$DEBIAN_MIRROR" ] \
            || die "the host's apt configuration has no source for Debian $codename; set DEBIAN_MIRROR to Debian's archive"
    fi
    printf '%s\n' "$DEBIAN_MIRROR"
}

# need_host_packages PKG...: installs what is missing from the host's own (Debian 12)
# sources. Prefer need_packages STEP, which takes the list from scripts/host-packages.
need_host_packages() {
    local missing=() lock
    _missing_host_packages "$@"
    [ ${#missing[@]} -eq 0 ] && return 0
    # One install at a time: on a fresh machine CI's parallel builds all start by
    # installing, and a second apt-get fails at once on dpkg's lock. The lock is held to
    # the end of this function (or of the process, when it dies); whoever waited looks
    # again, as the first may have installed what it needs.
    mkdir -p "$CACHE_DIR"
    exec {lock}>"$CACHE_DIR/host-packages.lock"
    flock "$lock"
    _missing_host_packages "$@"
    [ ${#missing[@]} -eq 0 ] && { exec {lock}>&-; return 0; }
    _install_host_packages
    exec {lock}>&-
}
# _missing_host_packages PKG...: sets the caller's `missing` to those not installed.
_missing_host_packages() {
    local p
    missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
}
# _install_host_packages: installs the caller's `missing` (need_host_packages, locked).
_install_host_packages() {
    step "installing host packages (Debian's, from the host's apt sources): ${missing[*]}"
    # The decision rests on this machine's apt state, not on a mark in the cache (a cache
    # restored from another machine, as CI's is, would skip the update): no package
    # lists at all means an update first; an install that fails on lists gone stale is
    # tried once more after an update.
    # The first install's failure is reported only when no update can follow.
    local updated= first=(logged --try)
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -print -quit 2>/dev/null)" ]; then
        logged "apt-get update" apt-get update || die "apt-get update failed"
        updated=1 first=(logged)
    fi
    # Another program's apt (an unattended upgrade) is waited for, not failed on.
    local install=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y
        --no-install-recommends "${missing[@]}")
    "${first[@]}" "installing ${missing[*]}" "${install[@]}" && return 0
    [ -z "$updated" ] || die "could not install host packages: ${missing[*]}"
    step "the install failed on this machine's package lists (stale?): apt-get update, then again"
    logged "apt-get update (the install failed: stale package lists?)" apt-get update \
        || die "apt-get update failed"
    logged "installing ${missing[*]}" "${install[@]}" \
        || die "could not install host packages: ${missing[*]}"
}

# need_packages STEP...: the host packages scripts/host-packages lists for these steps.
need_packages() {
    local s pkgs=() line more
    for s in "$@"; do
        line="$(sed -n "s/^$s:[[:space:]]*//p" "$REPO_ROOT/scripts/host-packages")"
        [ -n "$line" ] || die "scripts/host-packages has no line for step '$s'"
        read -r -a more <<<"$line"
        pkgs+=("${more[@]}")
    done
    need_host_packages "${pkgs[@]}"
}

# papt_download SUITE ARCH PKG VERSION DIR WHERE: downloads one binary package into DIR;
# if the archive no longer has that version, dies naming the versions it has and WHERE
# (the file that pins the version).
papt_download() {
    local suite="$1" arch="$2" pkg="$3" ver="$4" dir="$5" where="$6" have
    mkdir -p "$dir"
    (cd "$dir" && logged "downloading $pkg=$ver (Debian $suite, $arch)" papt "$suite" "$arch" -q download "$pkg=$ver") && return 0
    have="$(APT_CONFIG="$(papt_dir "$suite" "$arch")/apt.conf" apt-cache madison "$pkg" 2>/dev/null \
        | awk '/Packages$/ {print $3}' | sort -uV | xargs)"
    die "Debian $suite ($arch) does not offer $pkg=$ver (it has: ${have:-nothing}). Update the version in $where."
}

# papt SUITE ARCH apt-get-args...
# Runs apt-get against a private configuration for Debian SUITE (bookworm, trixie, sid, ...)
# and architecture ARCH, with its own lists, cache and an empty dpkg status. Nothing of the
# host's apt or dpkg state is read or written. Index files are refreshed once a day.
papt_dir() { printf '%s/apt/%s-%s' "$CACHE_DIR" "$1" "$2"; }
papt() {
    local suite="$1" arch="$2"; shift 2
    local dir mirror sources
    dir="$(papt_dir "$suite" "$arch")"
    mirror="$(debian_mirror)"
    sources="deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main"
    if [ ! -f "$dir/apt.conf" ]; then
        mkdir -p "$dir"/{lists/partial,cache/archives/partial,etc/preferences.d,etc/apt.conf.d}
        : >"$dir/status"
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
    # A changed mirror (DEBIAN_MIRROR, or the host's apt sources) means fresh indexes.
    if [ "$(cat "$dir/sources.list" 2>/dev/null)" != "$sources" ]; then
        printf '%s\n' "$sources" >"$dir/sources.list"
        rm -f "$dir/updated"
    fi
    if [ ! -f "$dir/updated" ] || [ -n "$(find "$dir/updated" -mmin +1440)" ]; then
        step "refreshing private apt index: Debian $suite ($arch), from Debian's archive as the host's apt names it"
        # --error-on=any: a failed index download is an error, not a warning, so an
        # unreachable archive is never marked fresh.
        APT_CONFIG="$dir/apt.conf" logged "apt-get update (private, Debian $suite $arch)" \
            apt-get --error-on=any update \
            || die "apt-get update for Debian $suite ($arch) failed (archive unreachable or mid-sync?); try again later"
        touch "$dir/updated"
    fi
    APT_CONFIG="$dir/apt.conf" apt-get "$@"
}

# custom_obj_dir SRC: the object folder of the kernel tree at SRC (a real path), one per
# tree location and kept, so that after a change only what changed rebuilds.
custom_obj_dir() {
    echo "$BUILD_DIR/kernel-src/$(printf '%s' "$1" | sha256sum | cut -c1-12)/obj"
}

# debian_kernel_tree LINE: prints the unpacked Debian source of kernel LINE in the cache,
# pristine. The variants share that tree (guest-tests/build-kernel.sh applies and reverts
# their patches in place), so a variant built before may have left its patches in: the
# kernel step, unpack-only, reverts them (or unpacks the tree if there is none). For the
# scripts that treat it as someone's tree: copy it.
debian_kernel_tree() {
    local line="$1" src
    find_tree() { find "$CACHE_DIR/kernel/work" -mindepth 2 -maxdepth 2 -type d -name src -path "*/work/$line.*" 2>/dev/null | head -n1; }
    src="$(find_tree)"
    if [ ! -f "$src/Makefile" ] || [ -n "$(cat "$(dirname "$src")/applied" 2>/dev/null)" ]; then
        env -u KERNEL_SRC -u KERNEL_IMAGE KERNEL="$line" VARIANT=stock KERNEL_UNPACK_ONLY=1 \
            "$REPO_ROOT/guest-tests/build-kernel.sh" >&2 || die "could not unpack a pristine $line tree"
        src="$(find_tree)"
    fi
    [ -f "$src/Makefile" ] || die "no unpacked $line tree in $CACHE_DIR/kernel/work"
    [ -z "$(cat "$(dirname "$src")/applied" 2>/dev/null)" ] || die "the $line tree in the cache still carries a variant's patches"
    echo "$src"
}
