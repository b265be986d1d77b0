#!/usr/bin/env bash
# Build .netbed-tools/ (git-ignored): this host's `ip` and `tc` (iproute2) with the shared
# libraries they need, for a machine that has neither, such as the lent GPU machine (issue 15:
# the shaped netbed there). Carry it with the device run (`carry: [".whl", ".netbed-tools"]`);
# bench/gpu_session.sh puts .netbed-tools/bin first on PATH when it is there. The wrappers give
# the system's loader the libraries directly, so what `ip netns exec` starts keeps its own
# environment. Needs an x86-64 host with iproute2 (Debian 12 here; glibc is the target's own).
set -eu
T=.netbed-tools
rm -rf "$T"
mkdir -p "$T/bin" "$T/real" "$T/lib"
for t in ip tc; do
    cp "$(command -v $t)" "$T/real/"
done
ldd "$T/real/ip" "$T/real/tc" | awk '{print $3}' | grep '^/' | sort -u \
    | grep -v -e 'libc\.so' -e 'libm\.so' | xargs -I{} cp -L {} "$T/lib/"
for t in ip tc; do
    cat >"$T/bin/$t" <<WRAP
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")/..
exec /lib64/ld-linux-x86-64.so.2 --library-path "\$here/lib" "\$here/real/$t" "\$@"
WRAP
    chmod +x "$T/bin/$t"
done
grep -qx '/.netbed-tools/' .git/info/exclude 2>/dev/null || echo '/.netbed-tools/' >>.git/info/exclude
"$T/bin/ip" -V && "$T/bin/tc" -V && du -sh "$T"
