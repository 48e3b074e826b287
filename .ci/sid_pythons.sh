#!/usr/bin/env bash
# CPython 3.14 and 3.15, which this machine's Debian lacks, from Debian sid in
# a chroot: built once at ${SID_ROOT:-/var/cache/fastloop-sid}, reused after.
#
# Run directly (as root):
#   bash .ci/sid_pythons.sh                   build if needed, print the versions
#   bash .ci/sid_pythons.sh [--bind DIR]... [--] CMD [ARG]...
#       build if needed, mount proc/sys/dev and each DIR (at the same path
#       inside), run CMD in the chroot, unmount (also on error or signal).
#       The exit status is CMD's.  This is the form for .ci/run, e.g.
#       bash .ci/sid_pythons.sh --bind "$PWD" bash -c "cd '$PWD' && python3.14 -m venv ..."
# Or sourced (builds if needed, then defines the functions):
#   source .ci/sid_pythons.sh
#   sid_mount DIR...   mount proc, sys, dev and each host DIR at the same path
#                      inside; sid_umount is added to the EXIT trap (a trap the
#                      caller sets later replaces it: call sid_umount there)
#   sid_run CMD...     CMD in the chroot: env -i, PATH, HOME=/root,
#                      LANG=C.UTF-8, and CI, PIP_* and the names in
#                      $SID_PASS_ENV passed through
#   sid_umount         unmount everything under the chroot (idempotent)
#
# The archive is the one this machine's apt sources name; it may be a dated
# snapshot, so the chroot's apt ignores Valid-Until.  pip inside reaches the
# package indexes as the host's pip does: the host's CA bundle, the host's pip
# settings (pip config list) written to the chroot's /etc/pip.conf, PIP_* passed
# through, and every local directory those name (find-links, file:// indexes)
# bind-mounted read-only at the same path while mounted.
# Environment: SID_ROOT (the chroot), SID_PACKAGES (extra Debian packages),
# SID_PASS_ENV (more variable names for sid_run).
set -euo pipefail

SID_ROOT=${SID_ROOT:-/var/cache/fastloop-sid}
SID_PYTHON_MINORS=(3.14 3.15)
# gcc and headers: cffi (cryptography's, for trustme) has no cp315 wheel.
SID_BUILD_PACKAGES=(gcc libc6-dev libffi-dev pkg-config python3.15-dev)
SID_MARKER=.fastloop-sid-ready
SID_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

sid_archive_url() {  # the Debian archive (not -security) the host's apt uses
    local files=() file url
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources; do
        if [[ -f $file ]]; then files+=("$file"); fi
    done
    ((${#files[@]})) || { echo "sid: no apt sources on this host" >&2; return 1; }
    url=$(awk '
        /^[[:space:]]*#/ { next }
        FILENAME ~ /\.sources$/ && tolower($1) == "uris:" {
            for (i = 2; i <= NF; i++) print $i; next }
        FILENAME !~ /\.sources$/ && $1 == "deb" {
            i = 2
            if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            print $i }
    ' "${files[@]}" | grep -E -m1 '^(https?|file)://.*/debian(/[0-9]{8}T[0-9]{6}Z)?/?$' || true)
    [[ -n $url ]] || { echo "sid: no Debian archive URL in ${files[*]}" >&2; return 1; }
    echo "${url%/}"
}

sid_host_pip_config() {  # host pip settings from its files, as key<TAB>value
    local line key value python
    python=$(command -v python3 || true)
    [[ -n $python ]] || return 0
    "$python" -m pip config list 2>/dev/null | while IFS= read -r line; do
        [[ $line == :env:* || $line != *=* ]] && continue   # env: passed as is
        key=${line%%=*}
        value=${line#*=}
        value=${value#[\'\"]}
        value=${value%[\'\"]}
        value=${value//\\n/ }
        printf '%s\t%s\n' "$key" "$value"
    done || true
}

sid_host_pip_paths() {  # local paths the host's pip settings and PIP_* name
    local name value token
    {
        sid_host_pip_config | cut -f2-
        for name in $(compgen -e); do
            if [[ $name == PIP_* ]]; then printf '%s\n' "${!name}"; fi
        done
    } | while read -r value; do
        for token in $value; do
            token=${token#file://}
            token=${token%/}
            # A local index's pages link to ../../files/...: take its parent.
            if [[ $token == */simple ]]; then token=${token%/simple}; fi
            if [[ $token == /* && -e $token ]]; then printf '%s\n' "$token"; fi
        done
    done | sort -u || true
}

sid_run() {  # sid_run CMD... : CMD in the chroot, in a clean environment
    local -a environment=(PATH="$SID_PATH" HOME=/root LANG=C.UTF-8)
    local name
    for name in $(compgen -e); do
        if [[ $name == CI || $name == PIP_* || " ${SID_PASS_ENV:-} " == *" $name "* ]]; then
            environment+=("$name=${!name}")
        fi
    done
    chroot "$SID_ROOT" /usr/bin/env -i "${environment[@]}" "$@"
}

sid_mounts() {  # mount points under the chroot, deepest first
    local root
    root=$(readlink -f "$SID_ROOT")
    awk -v root="$root" '$2 == root || index($2, root "/") == 1 { print $2 }' \
        /proc/self/mounts | sort -r
}

sid_umount() {
    local target
    for target in $(sid_mounts); do
        umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
    done
    if [[ -n $(sid_mounts) ]]; then
        echo "sid: still mounted under $SID_ROOT: $(sid_mounts | tr '\n' ' ')" >&2
        return 1
    fi
}

_sid_bind() {  # _sid_bind HOSTPATH [ro]: at the same path in the chroot
    local source=$1 target="$SID_ROOT$1"
    mkdir -p "$target"
    mountpoint -q "$target" && return 0
    mount --bind "$source" "$target"
    mount --make-rslave "$target" 2>/dev/null || true
    if [[ ${2:-} == ro ]]; then
        mount -o remount,bind,ro "$target" 2>/dev/null || true
    fi
}

_sid_add_exit_trap() {  # run sid_umount on exit, before any EXIT trap already set
    local existing
    existing=$(trap -p EXIT)
    [[ $existing == *sid_umount* ]] && return 0
    existing=${existing#"trap -- '"}
    existing=${existing%"' EXIT"}
    existing=${existing//"'\\''"/"'"}
    # shellcheck disable=SC2064  # expanded now on purpose
    trap "sid_umount; ${existing}" EXIT
    [[ -n $(trap -p INT) ]] || trap 'exit 130' INT
    [[ -n $(trap -p TERM) ]] || trap 'exit 143' TERM
}

sid_mount() {  # sid_mount [HOSTDIR]...: proc, sys, dev, the pip paths, each HOSTDIR
    local dir
    _sid_add_exit_trap
    mountpoint -q "$SID_ROOT/proc" || mount -t proc proc "$SID_ROOT/proc"
    mountpoint -q "$SID_ROOT/sys" || mount -t sysfs sysfs "$SID_ROOT/sys" \
        || _sid_bind /sys ro
    if ! mountpoint -q "$SID_ROOT/dev"; then  # with /dev/pts and /dev/shm
        mount --rbind /dev "$SID_ROOT/dev"
        mount --make-rslave "$SID_ROOT/dev" 2>/dev/null || true
    fi
    for dir in $(sid_host_pip_paths); do
        if [[ -d $dir ]]; then _sid_bind "$dir" ro; fi
    done
    for dir in "$@"; do
        dir=$(readlink -f "$dir")
        [[ -d $dir ]] || { echo "sid_mount: no directory $dir" >&2; return 1; }
        _sid_bind "$dir"
    done
}

sid_refresh() {  # host facts that may change between runs: DNS, CA bundle, pip
    local key value section file settings
    cp -L /etc/resolv.conf "$SID_ROOT/etc/resolv.conf" 2>/dev/null || true
    cp -L /etc/hosts "$SID_ROOT/etc/hosts" 2>/dev/null || true
    mkdir -p "$SID_ROOT/etc/fastloop-sid"
    if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
        cp -L /etc/ssl/certs/ca-certificates.crt "$SID_ROOT/etc/fastloop-sid/host-ca-certificates.crt"
        # Also where Python's ssl looks by default, and where a passed-through
        # PIP_CERT/SSL_CERT_FILE naming the host's bundle points.
        mkdir -p "$SID_ROOT/etc/ssl/certs"
        cp -L /etc/ssl/certs/ca-certificates.crt "$SID_ROOT/etc/ssl/certs/ca-certificates.crt"
    fi
    for file in $(sid_host_pip_paths); do  # constraint files and the like
        if [[ -f $file ]]; then
            mkdir -p "$SID_ROOT$(dirname "$file")"
            cp -L "$file" "$SID_ROOT$file"
        fi
    done
    settings=$(sid_host_pip_config)
    {
        echo "# Written by fastloop's .ci/sid_pythons.sh from the host's pip settings."
        for section in global $(cut -f1 <<<"$settings" | cut -s -d. -f1 | grep -vx global | sort -u); do
            echo "[$section]"
            if [[ $section == global ]]; then
                echo "cert = /etc/fastloop-sid/host-ca-certificates.crt"
            fi
            while IFS=$'\t' read -r key value; do
                [[ ${key%%.*} == "$section" && $key != global.cert ]] || continue
                echo "${key#*.} = $value"
            done <<<"$settings"
        done
    } >"$SID_ROOT/etc/pip.conf"
}

sid_ready() {  # built, and each python makes a venv with pip
    local minor
    [[ -f $SID_ROOT/$SID_MARKER ]] || return 1
    for minor in "${SID_PYTHON_MINORS[@]}"; do
        sid_run "python$minor" -c 'import ensurepip, venv, ssl' 2>/dev/null || return 1
    done
}

sid_build() {
    local started=$SECONDS url minor packages=()
    if sid_ready; then
        sid_refresh
        echo "sid: chroot at $SID_ROOT already built"
        return 0
    fi
    if ! command -v debootstrap >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
    fi
    url=$(sid_archive_url)
    echo "sid: building a Debian sid chroot at $SID_ROOT from $url"
    sid_umount
    if [[ -e $SID_ROOT ]]; then  # a partial or broken build: nothing is mounted in it
        rm -rf --one-file-system "$SID_ROOT"
    fi
    mkdir -p "$(dirname "$SID_ROOT")"
    debootstrap --variant=minbase sid "$SID_ROOT" "$url"
    cat >"$SID_ROOT/etc/apt/apt.conf.d/99fastloop-sid" <<'EOF'
// The archive may be a dated snapshot whose Release files have expired.
Acquire::Check-Valid-Until "false";
Acquire::Check-Date "false";
Acquire::Retries "3";
APT::Install-Recommends "false";
EOF
    printf '#!/bin/sh\nexit 101\n' >"$SID_ROOT/usr/sbin/policy-rc.d"  # no services
    chmod +x "$SID_ROOT/usr/sbin/policy-rc.d"
    sid_refresh
    for minor in "${SID_PYTHON_MINORS[@]}"; do
        packages+=("python$minor" "python$minor-venv")
    done
    packages+=(ca-certificates "${SID_BUILD_PACKAGES[@]}")
    # shellcheck disable=SC2206  # a list of names
    packages+=(${SID_PACKAGES:-})
    sid_mount
    sid_run env DEBIAN_FRONTEND=noninteractive apt-get update -q
    sid_run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${packages[@]}"
    sid_run apt-get clean
    sid_refresh  # ca-certificates rewrote the bundle: the host's again
    sid_umount
    touch "$SID_ROOT/$SID_MARKER"
    sid_ready || { echo "sid: the chroot's pythons do not work" >&2; return 1; }
    echo "sid: chroot built in $((SECONDS - started)) s"
}

if [[ $(id -u) != 0 ]]; then
    echo "sid_pythons.sh: needs root (chroot, mount)" >&2
    return 1 2>/dev/null || exit 1
fi
sid_build
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then  # run directly
    binds=()
    while (($#)); do
        case $1 in
            --bind) binds+=("$2"); shift 2 ;;
            --) shift; break ;;
            *) break ;;
        esac
    done
    if (($#)); then
        sid_mount "${binds[@]}"
        status=0
        sid_run "$@" || status=$?
        sid_umount
        exit "$status"
    fi
    for minor in "${SID_PYTHON_MINORS[@]}"; do
        sid_run "python$minor" -VV
    done
fi
