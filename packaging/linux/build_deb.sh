#!/usr/bin/env bash
# Build dist/quickdraft_<version>_<arch>.deb from the PyInstaller bundle (dist/quickdraft/).
#
#   packaging/linux/build_deb.sh [BUNDLE_DIR] [OUT_DIR]
#   QUICKDRAFT_DEB_VARIANT=cuda packaging/linux/build_deb.sh     # dist/quickdraft-cuda_<version>_<arch>.deb
#
# QUICKDRAFT_DEB_VARIANT=cuda packages a bundle built with llama.cpp's CUDA module as quickdraft-cuda,
# which Provides, Conflicts with and Replaces quickdraft: same files, same commands, one of the two
# installed at a time (apt swaps them). Unset, the package is quickdraft.
#
# Layout of the package:
#   /opt/quickdraft/                         the one-folder bundle (quickdraft, _internal/)
#   /usr/bin/quickdraft -> /opt/quickdraft/quickdraft            the desktop app
#   /usr/bin/quickdraft-cli                  the command line: runs /opt/quickdraft/quickdraft --cli "$@"
#   /usr/share/applications/quickdraft.desktop                  the menu entry (Development; Utility)
#   /usr/share/icons/hicolor/{16..512}/apps/quickdraft.png, scalable/apps/quickdraft.svg
#   /usr/share/doc/quickdraft/copyright
# The menu and icon caches are refreshed by dpkg's triggers (desktop-file-utils, hicolor-icon-theme),
# so the package needs no maintainer scripts.
set -euo pipefail

die() { echo "build_deb.sh: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$(realpath -m "${1:-$ROOT/dist/quickdraft}")"
OUT="$(realpath -m "${2:-$ROOT/dist}")"
NAME=quickdraft                      # the install paths, the commands, the menu entry and the icons
VARIANT="${QUICKDRAFT_DEB_VARIANT:-}"
case "$VARIANT" in
    "") PACKAGE=$NAME ;;
    cuda) PACKAGE=$NAME-cuda ;;      # the package name; the files stay where quickdraft's are
    *) die "unknown QUICKDRAFT_DEB_VARIANT '$VARIANT' (leave it unset, or cuda)" ;;
esac
ICON_SIZES="16 24 32 48 64 128 256 512"
# Set DEB_MAINTAINER="Name <email>" for a release; the default address is a reserved, non-routable one.
MAINTAINER="${DEB_MAINTAINER:-Quickdraft developers <packaging@quickdraft.invalid>}"

# Libraries the bundle loads from the system (PyInstaller leaves out libc, OpenGL/EGL and what the
# build machine lacks): found with objdump -p NEEDED over the bundle minus the files it contains.
DEPENDS_FIXED="libgl1, libegl1, libwayland-client0, libwayland-cursor0, libwayland-egl1"
# Qt's xcb platform plugin (the window on X11: plugins/platforms/libqxcb.so and libQt6XcbQpa.so.6)
# loads these from the system; without one of them the app stops with "Could not load the Qt
# platform plugin xcb". Debian package:soname, from `ldd libqxcb.so` and `dpkg -S` of each library
# (PySide6 6.11); tests/packaging checks the list against ldd whenever it can run it.
QT_XCB_LIBRARIES="libxcb1:libxcb.so.1 libxcb-cursor0:libxcb-cursor.so.0 libxcb-icccm4:libxcb-icccm.so.4
  libxcb-image0:libxcb-image.so.0 libxcb-keysyms1:libxcb-keysyms.so.1 libxcb-randr0:libxcb-randr.so.0
  libxcb-render0:libxcb-render.so.0 libxcb-render-util0:libxcb-render-util.so.0 libxcb-shape0:libxcb-shape.so.0
  libxcb-shm0:libxcb-shm.so.0 libxcb-sync1:libxcb-sync.so.1 libxcb-util1:libxcb-util.so.1
  libxcb-xfixes0:libxcb-xfixes.so.0 libxcb-xkb1:libxcb-xkb.so.1 libxkbcommon0:libxkbcommon.so.0
  libxkbcommon-x11-0:libxkbcommon-x11.so.0 libx11-6:libX11.so.6 libx11-xcb1:libX11-xcb.so.1"
RECOMMENDS="libgtk-3-0 | libgtk-3-0t64"
# GPU backends. A bundle with llama.cpp's Vulkan module (libggml-vulkan.so) recommends the Vulkan loader,
# libvulkan1: a Recommends, not a Depends, because the module is optional at run time (without the
# loader the app reports the module as not loaded and runs on the CPU), while apt installs Recommends
# by default, so an ordinary install gets it. The CUDA module needs libcuda.so.1, which comes with the
# NVIDIA driver (libnvidia-compute-NNN on Ubuntu, libcuda1 on Debian): never a Depends, for the same
# reason and because no one package name covers every driver; the CUDA runtime libraries (cudart,
# cuBLAS) are in the bundle.
VULKAN_RECOMMENDS="libvulkan1"
DRIVER_PACKAGE='(^|[ ,|])(lib)?(nvidia|cuda)'   # what Depends may never name

app_version() {
    sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/app/__init__.py"
}

# The newest GLIBC_x.y symbol version any bundled binary needs: the libc6 the package depends on.
glibc_needed() {
    find "$BUNDLE" -type f \( -name '*.so*' -o -perm -u+x \) -print0 \
        | xargs -0 objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' \
        | sort -uV | tail -n 1
}

# The packages of QT_XCB_LIBRARIES, comma-separated, for the control file's Depends.
qt_xcb_depends() {
    local entry out=""
    for entry in $QT_XCB_LIBRARIES; do
        out="${out:+$out, }${entry%%:*}"
    done
    echo "$out"
}

# bundle_has NAME_GLOB [DIR]: whether the bundle (or the staged package in DIR) holds such a file.
bundle_has() {
    [ -n "$(find "${2:-$BUNDLE}" -name "$1" -print -quit 2>/dev/null)" ]
}

deb_file_name() {  # deb_file_name VERSION ARCH
    echo "${PACKAGE}_$1_$2.deb"
}

control_depends() {  # control_depends GLIBC_VERSION
    echo "libc6 (>= $1), $DEPENDS_FIXED, $(qt_xcb_depends)"
}

control_recommends() {  # control_recommends STAGE_DIR
    local out=$RECOMMENDS
    if bundle_has 'libggml-vulkan.so*' "$1"; then
        out="$out, $VULKAN_RECOMMENDS"
    fi
    echo "$out"
}

write_control() {
    local dir="$1" version="$2" arch="$3" glibc="$4" size depends
    size="$(du -sk --exclude=DEBIAN "$dir" | cut -f1)"
    depends="$(control_depends "$glibc")"
    if [[ "$depends" =~ $DRIVER_PACKAGE ]]; then
        die "Depends names a GPU driver package ($depends): the driver is the user's, and optional"
    fi
    mkdir -p "$dir/DEBIAN"
    {
        echo "Package: $PACKAGE"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: $MAINTAINER"
        echo "Installed-Size: $size"
        echo "Depends: $depends"
        echo "Recommends: $(control_recommends "$dir")"
        if [ "$PACKAGE" != "$NAME" ]; then
            echo "Provides: $NAME (= $version)"
            echo "Conflicts: $NAME"
            echo "Replaces: $NAME"
        fi
        echo "Section: devel"
        echo "Priority: optional"
        cat <<EOF
Description: desktop chat for local LLMs with speculative decoding
 Quickdraft runs GGUF models on llama.cpp and answers faster with speculative
 decoding: a small draft model proposes tokens, the main model verifies them
 in one batch, and the window shows live tokens/second and acceptance rates.
 .
 Includes the quickdraft desktop app and the quickdraft-cli command line.
EOF
        if [ "$VARIANT" = cuda ]; then
            cat <<EOF
 .
 This build adds llama.cpp's CUDA 12 backend and the CUDA runtime libraries
 it needs. It uses the NVIDIA driver when one recent enough for CUDA 12 is
 installed, and otherwise runs on Vulkan or the CPU.
EOF
        fi
    } > "$dir/DEBIAN/control"
}

install_files() {
    local dir="$1"
    mkdir -p "$dir/opt" "$dir/usr/bin" "$dir/usr/share/applications" "$dir/usr/share/doc/$PACKAGE"
    cp -a "$BUNDLE" "$dir/opt/$NAME"
    ln -s "/opt/$NAME/quickdraft" "$dir/usr/bin/quickdraft"
    printf '#!/bin/sh\nexec /opt/%s/quickdraft --cli "$@"\n' "$NAME" > "$dir/usr/bin/quickdraft-cli"
    chmod 0755 "$dir/usr/bin/quickdraft-cli"
    install -m 0644 "$ROOT/resources/quickdraft.desktop" "$dir/usr/share/applications/$NAME.desktop"
    for size in $ICON_SIZES; do
        install -D -m 0644 "$ROOT/resources/icons/quickdraft-$size.png" \
            "$dir/usr/share/icons/hicolor/${size}x${size}/apps/$NAME.png"
    done
    install -D -m 0644 "$ROOT/resources/icons/quickdraft.svg" "$dir/usr/share/icons/hicolor/scalable/apps/$NAME.svg"
    write_copyright "$dir/usr/share/doc/$PACKAGE/copyright"
}

write_copyright() {
    cat > "$1" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: quickdraft

Files: *
Copyright: the Quickdraft authors
License: MIT

Files: opt/quickdraft/_internal/*
Comment: Bundled third-party runtime: CPython (PSF License), Qt 6 and PySide6 (LGPL-3.0),
 llama.cpp and llama-cpp-python (MIT), NumPy (BSD-3-Clause) and the other Python packages
 listed in Quickdraft's pyproject.toml, each under its own license.
EOF
}

main() {
    [ -x "$BUNDLE/quickdraft" ] || die "no bundle at $BUNDLE: build it first (pyinstaller packaging/quickdraft.spec)"
    command -v dpkg-deb >/dev/null || die "dpkg-deb is required"
    command -v objdump >/dev/null || die "objdump (binutils) is required"
    local version arch glibc stage deb
    version="$(app_version)"
    [ -n "$version" ] || die "no __version__ in app/__init__.py"
    arch="$(dpkg --print-architecture)"
    glibc="$(glibc_needed)"
    [ -n "$glibc" ] || die "could not read the glibc version the bundle needs"
    if [ "$VARIANT" = cuda ]; then
        bundle_has 'libggml-cuda.so*' || die "no libggml-cuda.so in $BUNDLE: the cuda variant needs llama-cpp-python built with -DGGML_CUDA=ON"
        bundle_has 'libcudart.so*' || die "no libcudart.so in $BUNDLE: the CUDA runtime libraries were not collected"
    fi
    stage="$ROOT/build/deb/${PACKAGE}_${version}_${arch}"
    deb="$OUT/$(deb_file_name "$version" "$arch")"
    rm -rf "$stage"
    mkdir -p "$stage" "$OUT"
    install_files "$stage"
    write_control "$stage" "$version" "$arch" "$glibc"
    dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
    echo "$deb ($(du -h "$deb" | cut -f1), needs libc6 >= $glibc)"
}

# Sourced (by the packaging tests, to write a control file), it only defines the functions above.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
