#!/usr/bin/env bash
# make fresh-check: README's two commands on a freshly set-up machine.
#
# Builds a minimal Debian root of the host's release (mmdebstrap --variant=minbase) that
# has only make, git and ca-certificates, plus what any machine of this kind has: its
# trust store, its pip and cargo configuration and its Rust toolchain (bind-mounted
# read-only). Clones the project's HEAD into it and runs `make demo`, then `make test`
# there, as root, with an empty cache. Whatever a step needs and the project's own files
# do not install fails here, loudly, with the last lines of the failing command.
#
# Usage: scripts/fresh-check.sh              (or: make fresh-check)
# Environment: FRESH_DIR (default $BUILD_DIR/fresh: the root, the logs, times.txt),
#   FRESH_COMMANDS (default "make demo;make test"), FRESH_KEEP=1 keeps the root after a
#   pass (it is always kept after a failure, for a look inside, until the next run),
#   FRESH_ADOPT=1 moves the root's cache entries that $CACHE_DIR lacks into it after a
#   pass (CI: the host's `make test` then reuses them instead of building them again),
#   FRESH_HANDOVER_AFTER=CMD copies them there as soon as the command CMD (one of
#   FRESH_COMMANDS) has passed and then creates $FRESH_DIR/handed-over (CI: a cold run's
#   host starts what needs only QEMU and the default line while the root's later
#   commands run), DEBIAN_MIRROR (see scripts/lib.sh).
# Only HEAD is checked: uncommitted changes are not part of the clone.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
no_arguments "$@"

FRESH_DIR="${FRESH_DIR:-$BUILD_DIR/fresh}"
FRESH_COMMANDS="${FRESH_COMMANDS:-make demo;make test}"
ROOT="$FRESH_DIR/root"
CODENAME="$(host_codename)"
[ "$(id -u)" = 0 ] || die "fresh-check needs root (mmdebstrap, chroot, mounts)"
command -v rustc >/dev/null || die "no Rust toolchain on PATH (the one prerequisite a user brings)"
SYSROOT="$(rustc --print sysroot)"
[ -x "$SYSROOT/bin/cargo" ] || die "the active Rust toolchain ($SYSROOT) has no cargo"

need_packages fresh-check

# A root from an earlier run goes first. Its mounts lived in a private mount namespace
# and ended with it; refuse to delete anything that is still mounted all the same.
if grep -qF " $ROOT/" /proc/self/mountinfo; then
    die "something is still mounted below $ROOT: unmount it first"
fi
rm -rf "$ROOT"
mkdir -p "$FRESH_DIR"
[ -z "$(git -C "$REPO_ROOT" status --porcelain --untracked-files=no)" ] \
    || warn "the work tree has uncommitted changes: fresh-check tests HEAD ($(git -C "$REPO_ROOT" rev-parse --short HEAD)) only"

# The root's apt sources: the host's Debian archive for its release, its -updates and
# -security suites, as the host's apt names them.
mapfile -t sources < <(host_debian_sources)
if [ -n "$DEBIAN_MIRROR" ]; then   # the override replaces the host's main archive
    for i in "${!sources[@]}"; do
        [[ "${sources[i]}" == *" $CODENAME main" ]] && sources[i]="deb $DEBIAN_MIRROR $CODENAME main"
    done
fi
[ ${#sources[@]} -gt 0 ] || die "the host's apt configuration has no source for Debian $CODENAME; set DEBIAN_MIRROR"

step "fresh-check: building a minimal Debian $CODENAME root in $ROOT (mmdebstrap minbase + make, git, ca-certificates)"
logged "mmdebstrap" mmdebstrap --variant=minbase --include=make,git,ca-certificates \
    "$CODENAME" "$ROOT" "${sources[@]}" || die "mmdebstrap failed"

# What every machine of this kind has besides: its trust store (the egress CA among
# it), name resolution, pip's and cargo's configuration.
cp -a /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
cp -a /etc/ssl/certs/. "$ROOT/etc/ssl/certs/"
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
for f in /etc/pip.conf /root/.config/pip/pip.conf /root/.pip/pip.conf \
    /root/.cargo/config.toml /root/.cargo/config; do
    if [ -f "$f" ]; then mkdir -p "$ROOT$(dirname "$f")" && cp "$f" "$ROOT$f"; fi
done

step "fresh-check: cloning HEAD ($(git -C "$REPO_ROOT" log -1 --format='%h %s'))"
mkdir -p "$ROOT/work"
git clone -q "$REPO_ROOT" "$ROOT/work/main" || die "git clone failed"
SHARED=""
[ -d "$REPO_ROOT/../shared" ] && SHARED="$(cd "$REPO_ROOT/../shared" && pwd)"
[ -n "$SHARED" ] && mkdir -p "$ROOT/work/shared"
mkdir -p "$ROOT$SYSROOT"

# The environment inside: a login's basics, the toolchain's bin, and the machine's own
# pip/proxy settings; nothing else of the caller's.
envs=(HOME=/root LANG=C.UTF-8 TERM=dumb USER=root
    "PATH=$SYSROOT/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
while IFS= read -r v; do envs+=("$v"); done < <(env | grep -E '^(PIP_[A-Z_]+|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)=' || true)

# adopt_cache FROM TO [copy]: moves (or copies) every cache entry FROM has and TO lacks
# into TO. Entries
# (qemu/<key>, kernel/<result>, kernel/work/<version>, ...) are named after a hash or
# version of their exact inputs, so what the fresh root built is what a build on the
# host would build. Only the folders that hold entries are entered; an entry the host
# has is never touched, nor one being written (*.tmp), a lock or a stamp. A copy is
# made beside the entry and renamed into place, so that the host never sees half of one.
adopt_cache() {
    local from="$1" to="$2" mode="${3:-move}" rel="${4:-}" e name
    for e in "$from"/*; do
        [ -e "$e" ] || continue
        name="${e##*/}"
        case "$name" in *.tmp|lock) continue ;; esac
        # A copy hands over only the builds (QEMU, kernels, initramfs), never what the
        # host may be filling itself meanwhile (downloads, tools, the private apt root).
        if [ "$mode" = copy ]; then
            case "$rel$name" in
                qemu|kernel|kernel/work|initramfs)
                    adopt_cache "$e" "$to/$name" copy "$rel$name/"; continue ;;
                qemu/[0-9]*|kernel/*|initramfs/*) ;;
                *) continue ;;
            esac
        fi
        if [ ! -e "$to/$name" ]; then
            mkdir -p "$to"
            if [ "$mode" = copy ]; then
                rm -rf "$to/$name.handover.tmp"
                if cp -a "$e" "$to/$name.handover.tmp" && mv -T "$to/$name.handover.tmp" "$to/$name"; then
                    printf '  copied %s\n' "$rel$name" >&2
                else
                    rm -rf "$to/$name.handover.tmp"
                fi
            else
                mv -T "$e" "$to/$name" && printf '  adopted %s\n' "$rel$name" >&2
            fi
        else
            case "$rel$name" in
                qemu|qemu/source|qemu/tools|kernel|kernel/work|initramfs)
                    adopt_cache "$e" "$to/$name" "$mode" "$rel$name/" ;;
            esac
        fi
    done
}

# in_root CMD: runs CMD (a shell command line) in /work/main of the root, in a private
# mount and pid namespace: /dev, /proc, the toolchain and shared/ are mounted there only
# for the command's lifetime, and every process it leaves is ended with it.
in_root() {
    unshare --mount --pid --fork --kill-child -- bash -euc '
        root="$1" sysroot="$2" shared="$3"; shift 3
        mount --make-rprivate /
        mount --rbind /dev "$root/dev"
        mount -t proc proc "$root/proc"
        mount -t sysfs sysfs "$root/sys"
        mount --bind "$sysroot" "$root$sysroot" && mount -o remount,bind,ro "$root$sysroot"
        if [ -n "$shared" ]; then
            mount --bind "$shared" "$root/work/shared" && mount -o remount,bind,ro "$root/work/shared"
        fi
        exec chroot "$root" /usr/bin/env -i "$@"
    ' fresh "$ROOT" "$SYSROOT" "$SHARED" "${envs[@]}" /bin/bash -c "cd /work/main && $1"
}

: >"$FRESH_DIR/times.txt"
rm -f "$FRESH_DIR/handed-over"
IFS=';' read -r -a commands <<<"$FRESH_COMMANDS"
for cmd in "${commands[@]}"; do
    log="$FRESH_DIR/$(tr -c 'A-Za-z0-9\n' '-' <<<"$cmd").log"
    step "fresh-check: '$cmd' in the fresh root (cold; log: $log)"
    start=$SECONDS
    # The console shows the commands' own step lines and test tallies; the log has all.
    set +e
    in_root "$cmd" </dev/null 2>&1 | tee "$log" \
        | { grep --line-buffered -E '^==> |^[0-9]+ passed, [0-9]+ failed|^test result:|^error|^demo (PASSED|FAILED)' | sed -u 's/^/    | /'; true; }
    rc=${PIPESTATUS[0]}
    set -e
    took=$((SECONDS - start))
    if [ "$rc" -ne 0 ]; then
        printf 'error: fresh-check: %s FAILED in the fresh root after %d s; its last lines:\n' "'$cmd'" "$took" >&2
        tail -n 40 "$log" | sed 's/^/  | /' >&2
        die "fresh-check failed: '$cmd' (whole log: $log; the root stays in $ROOT)"
    fi
    printf '%s\t%d s\n' "$cmd" "$took" | tee -a "$FRESH_DIR/times.txt"
    step "fresh-check: '$cmd' passed in $took s"
    if [ "$cmd" = "${FRESH_HANDOVER_AFTER:-}" ]; then
        # Between two commands nothing in the root writes its cache: the copy is whole.
        step "fresh-check: copying the fresh root's cache entries to $CACHE_DIR (where it has none of the same inputs)"
        adopt_cache "$ROOT/root/.cache/ism-emu" "$CACHE_DIR" copy
        touch "$FRESH_DIR/handed-over"
    fi
done

if [ "${FRESH_ADOPT:-0}" = 1 ]; then
    step "fresh-check: handing the fresh root's cache entries to $CACHE_DIR (where it has none of the same inputs)"
    adopt_cache "$ROOT/root/.cache/ism-emu" "$CACHE_DIR"
fi
if [ "${FRESH_KEEP:-0}" != 1 ]; then
    step "fresh-check: removing $ROOT"
    rm -rf "$ROOT"
fi
step "fresh-check: README's commands passed on a fresh $CODENAME root (times: $FRESH_DIR/times.txt)"
