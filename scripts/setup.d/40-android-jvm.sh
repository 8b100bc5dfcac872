#!/usr/bin/env bash
# What compiles the Android app and runs its logic on the JVM (targets/android/app.py,
# tests/test_android.py); Gradle, the Android Gradle Plugin and Google's Maven cannot be reached here.
#  - kotlinc 2.0.21 (the app's Kotlin version) from npm's kotlin-compiler, pinned by tools/kotlin's lockfile;
#  - android.jar (API 23) from Debian's libandroid-23-java, which only the unstable suite carries: fetched
#    with a private apt configuration (own sources.list, lists, cache and status) so the system's sources
#    stay bookworm, and unpacked into tools/android-23/ (git-ignored; targets/android/app.py reads it there);
#  - JUnit 4 + hamcrest (junit4) and a real org.json for the JVM (libandroid-json-java: android.jar's
#    org.json classes are stubs that throw), from bookworm.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash scripts/npm_ci.sh tools/kotlin node_modules/kotlin-compiler/bin/kotlinc-jvm "compiling the Android app"

need_root() {
    echo "setup: $1 is missing (compiling and testing the Android app); as root run: bash scripts/setup.sh" >&2
}

SDK=tools/android-23
if [ ! -f "$SDK/android.jar" ]; then
    if ! command -v apt-get >/dev/null; then
        echo "setup: $SDK/android.jar is missing and this is no Debian (apt-get): see mobile/README.md (Android)" >&2
    else
        work=$(mktemp -d)
        trap 'rm -rf "$work"' EXIT
        # the mirror the system already uses, suite sid, in a sources.list apt reads only with these options
        mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror:-http://deb.debian.org/debian} sid main" \
            >"$work/sources.list"
        mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
        : >"$work/status"
        apt_private=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
                     -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
                     -o Dir::State::status="$work/status" -o APT::Sandbox::User=root)
        apt-get -qq "${apt_private[@]}" update
        (cd "$work/deb" && apt-get -qq "${apt_private[@]}" download libandroid-23-java)
        deb=$(ls "$work"/deb/libandroid-23-java_*.deb)
        dpkg-deb -x "$deb" "$work/root"
        mkdir -p "$SDK"
        cp "$work/root/usr/lib/android-sdk/platforms/android-23/android.jar" "$SDK/android.jar.tmp"
        # the package's version, for the app_build record (compiled_against)
        dpkg-deb -f "$deb" Version >"$SDK/VERSION"
        mv "$SDK/android.jar.tmp" "$SDK/android.jar"
        echo "setup: $SDK/android.jar ready (libandroid-23-java $(cat "$SDK/VERSION"), Debian sid)"
    fi
fi

missing=()
for jar in /usr/share/java/junit4.jar /usr/share/java/hamcrest-core.jar /usr/share/java/com.android.json.jar; do
    [ -f "$jar" ] || missing+=("$jar")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        need_root "${missing[*]}"
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends junit4 libandroid-json-java >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends junit4 libandroid-json-java >/dev/null; }
    echo "setup: installed junit4 $(dpkg-query -W -f '${Version}' junit4), libandroid-json-java $(dpkg-query -W -f '${Version}' libandroid-json-java)"
fi
