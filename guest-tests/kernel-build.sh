# Configuring, building and collecting a guest kernel: shared by build-kernel.sh (Debian's
# source packages) and build-kernel-tree.sh (your own tree). Sourced after scripts/lib.sh;
# the caller sets SRC, OBJ and KMAKE (make -C "$SRC" O="$OBJ" ... with ARCH and
# CROSS_COMPILE exported).

# kernel_fragments VERSION: FRAGMENTS = the config fragments for a kernel VERSION
# (X.Y or X.Y.Z): ism.config, then ism-<X>.x.config and ism-<X.Y>.config where present.
kernel_fragments() {
    local v="$1" major minor dir="$REPO_ROOT/guest-tests/kernel"
    major="${v%%.*}"; minor="$(cut -d. -f2 <<<"$v")"
    FRAGMENTS=("$dir/ism.config")
    [ -f "$dir/ism-$major.x.config" ] && FRAGMENTS+=("$dir/ism-$major.x.config")
    [ -f "$dir/ism-$major.$minor.config" ] && FRAGMENTS+=("$dir/ism-$major.$minor.config")
    return 0
}

# configure_kernel BASE: allnoconfig (BASE empty) or BASE (a .config file) plus
# FRAGMENTS, then olddefconfig; dies unless every fragment option landed as requested.
configure_kernel() {
    local base="$1" line sym val got bad=()
    mkdir -p "$OBJ"
    if [ -n "$base" ]; then
        step "configuring: $base + ${FRAGMENTS[*]##*/}"
        cp "$base" "$OBJ/.config"
    else
        step "configuring: allnoconfig + ${FRAGMENTS[*]##*/}"
        "${KMAKE[@]}" -s allnoconfig >&2 || die "make allnoconfig failed"
    fi
    (cd "$OBJ" && "$SRC/scripts/kconfig/merge_config.sh" -m -O "$OBJ" "$OBJ/.config" "${FRAGMENTS[@]}" >/dev/null) \
        || die "merge_config.sh failed"
    "${KMAKE[@]}" -s olddefconfig >&2 || die "make olddefconfig failed"

    # Every option of every fragment must have landed with the requested value; a later
    # fragment (a variant's) overrides an earlier one, as in merge_config.sh.
    local -A wanted=()
    while IFS= read -r line; do
        if [[ "$line" =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
            wanted["${BASH_REMATCH[1]}"]="$line"
        elif [[ "$line" =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set ]]; then
            wanted["${BASH_REMATCH[1]}"]="$line"
        fi
    done < <(cat "${FRAGMENTS[@]}")
    while IFS= read -r line; do
        if [[ "$line" =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
            sym="${BASH_REMATCH[1]}"; val="${BASH_REMATCH[2]}"
            if [ "$val" = n ]; then
                grep -q "^$sym=" "$OBJ/.config" && bad+=("$sym: wanted n, got $(grep "^$sym=" "$OBJ/.config" | cut -d= -f2-)")
            else
                got="$(grep "^$sym=" "$OBJ/.config" | cut -d= -f2- || true)"
                [ "$got" = "$val" ] || bad+=("$sym: wanted $val, got ${got:-not set}")
            fi
        elif [[ "$line" =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set ]]; then
            sym="${BASH_REMATCH[1]}"
            grep -q "^$sym=" "$OBJ/.config" && bad+=("$sym: wanted not set, got $(grep "^$sym=" "$OBJ/.config" | cut -d= -f2-)")
        fi
    done < <(printf '%s\n' "${wanted[@]}")
    if [ ${#bad[@]} -gt 0 ]; then
        printf '  %s\n' "${bad[@]}" >&2
        die "${#bad[@]} option(s) of the config fragments did not land (see above; missing dependencies or renamed symbols in this tree?)"
    fi
    step "config verified: every fragment option has its requested value"
}

# build_kernel WHAT: bzImage and modules.
build_kernel() {
    step "building $1: nice make -j2 (a cold build takes several minutes)"
    local t0=$SECONDS
    "${KMAKE[@]}" -s bzImage modules >&2 || die "kernel build failed ($1)"
    step "compiled in $((SECONDS - t0)) s"
}

# collect_kernel RESULT KEY=VALUE...: bzImage, System.map, .config, the modules and
# kernel.release into RESULT (atomically), and build-info with the KEY=VALUE lines.
collect_kernel() {
    local result="$1" tmp="$1.tmp"; shift
    rm -rf "$tmp"; mkdir -p "$tmp"
    cp "$OBJ/arch/s390/boot/bzImage" "$OBJ/System.map" "$OBJ/.config" "$tmp/"
    "${KMAKE[@]}" -s modules_install INSTALL_MOD_PATH="$tmp" INSTALL_MOD_STRIP=1 DEPMOD=/sbin/depmod >&2
    "${KMAKE[@]}" -s kernelrelease >"$tmp/kernel.release"
    rm -f "$tmp"/lib/modules/*/build "$tmp"/lib/modules/*/source
    if grep -q '^CONFIG_GCOV_KERNEL=y' "$OBJ/.config"; then
        collect_gcov "$tmp/gcov"
        set -- "$@" "GCOV_OBJ=$OBJ" "GCOV_SRC=$SRC"
    fi
    { printf '%s\n' "$@"; echo "RELEASE=$(cat "$tmp/kernel.release")"; } >"$tmp/build-info"
    rm -rf "$result"; mv -T "$tmp" "$result"
}

# publish_kernel RESULT OUT WHAT: OUT (in the build folder) becomes a link to RESULT.
publish_kernel() {
    local result="$1" out="$2"
    mkdir -p "$BUILD_DIR"
    if [ -e "$out" ] && [ ! -L "$out" ]; then rm -rf "$out"; fi
    ln -sfn "$result" "$out.new" && mv -T "$out.new" "$out"
    step "kernel $3, $(cat "$result/kernel.release"): $out"
}

# collect_gcov DIR: what turns a GCOV=1 guest's counters into a report, kept with the
# kernel because the shared object tree moves on to other variants: the .gcno files of
# the profiled folders' objects in THIS build (DIR/obj/<path>) and their sources
# (DIR/src/<path>). This build's objects are those of the modules modules.order names
# (each module's .mod lists them): the tree also holds the objects of other variants,
# e.g. smc_loopback.o of VARIANT=loopback, which this kernel does not have.
collect_gcov() {
    local dir="$1" d mod o n=0
    while IFS= read -r mod; do
        case "$mod" in net/smc/* | drivers/s390/net/* | drivers/dibs/*) ;; *) continue ;; esac
        for o in $(cat "$OBJ/${mod%.o}.mod"); do
            [ -f "$OBJ/${o%.o}.gcno" ] || continue
            mkdir -p "$dir/obj/$(dirname "$o")"
            cp "$OBJ/${o%.o}.gcno" "$dir/obj/$(dirname "$o")/"
            n=$((n + 1))
        done
    done <"$OBJ/modules.order"
    for d in net/smc drivers/s390/net drivers/dibs; do
        [ -d "$SRC/$d" ] || continue
        mkdir -p "$dir/src/$d"
        cp "$SRC/$d"/*.[ch] "$dir/src/$d/"
    done
    [ "$n" -gt 0 ] || die "a GCOV kernel without .gcno files in its profiled folders"
    step "gcov: $n .gcno files and their sources kept in $dir"
}
