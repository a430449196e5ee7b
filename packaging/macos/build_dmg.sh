#!/usr/bin/env bash
# Build dist/Quickdraft-<version>-macos-<arch>.dmg from the PyInstaller app bundle (dist/Quickdraft.app).
#
#   packaging/macos/build_dmg.sh [APP_BUNDLE] [OUT_DIR]
#
# The disk image holds Quickdraft.app and a link to /Applications (drag to install).
# Optional environment:
#   CODESIGN_IDENTITY  "Developer ID Application: ..." signs the app (hardened runtime, entitlements.plist)
#                      and the image; without it the app keeps PyInstaller's ad-hoc signature and users
#                      open it the first time with right click > Open.
#   NOTARY_PROFILE     a `xcrun notarytool store-credentials` profile: notarize and staple the image.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
APP="${1:-$ROOT/dist/Quickdraft.app}"
OUT="${2:-$ROOT/dist}"
NAME=Quickdraft

die() { echo "build_dmg.sh: $*" >&2; exit 1; }

app_version() {
    sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/app/__init__.py"
}

sign_app() {
    [ -n "${CODESIGN_IDENTITY:-}" ] || { echo "no CODESIGN_IDENTITY: keeping the ad-hoc signature"; return; }
    codesign --force --deep --options runtime --timestamp \
        --entitlements "$HERE/entitlements.plist" --sign "$CODESIGN_IDENTITY" "$APP"
    codesign --verify --deep --strict --verbose=2 "$APP"
}

make_image() {
    local dmg="$1" version="$2" stage
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' RETURN
    ditto "$APP" "$stage/$NAME.app"
    ln -s /Applications "$stage/Applications"
    rm -f "$dmg"
    hdiutil create -volname "$NAME $version" -srcfolder "$stage" -fs HFS+ -format UDZO -ov "$dmg"
    hdiutil verify "$dmg"
}

sign_and_notarize_image() {
    local dmg="$1"
    [ -n "${CODESIGN_IDENTITY:-}" ] || return 0
    codesign --force --timestamp --sign "$CODESIGN_IDENTITY" "$dmg"
    [ -n "${NOTARY_PROFILE:-}" ] || return 0
    xcrun notarytool submit "$dmg" --keychain-profile "$NOTARY_PROFILE" --wait
    xcrun stapler staple "$dmg"
}

main() {
    [ "$(uname -s)" = Darwin ] || die "hdiutil and codesign exist on macOS only"
    [ -d "$APP/Contents/MacOS" ] || die "no app bundle at $APP: build it first (pyinstaller packaging/quickdraft.spec)"
    local version dmg
    version="$(app_version)"
    [ -n "$version" ] || die "no __version__ in app/__init__.py"
    mkdir -p "$OUT"
    dmg="$OUT/$NAME-$version-macos-$(uname -m).dmg"
    sign_app
    make_image "$dmg" "$version"
    sign_and_notarize_image "$dmg"
    echo "$dmg ($(du -h "$dmg" | cut -f1))"
}

main "$@"
