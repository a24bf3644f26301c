# mocker container image (Debian 12). Build:  docker build -t mocker .
# Run:    docker run --rm -p 5555-5559:5555-5559 -p 8000:8000 mocker
# The image runs `mocker serve --config /etc/mocker/mocker.toml` (deploy/kubernetes/mocker.toml:
# every endpoint on all interfaces, the port plan below); other commands: `docker run mocker
# replay …`, `docker run mocker index …`. tests/deploy/docker_test.py checks this file against
# the built binary (runtime packages, exposed ports, the health check).

# ---- build stage: the repository's own entry point, Release, the binary only -------------------
FROM debian:bookworm AS build
WORKDIR /src
COPY . .
# scripts/dev installs the Debian packages it lists (PACKAGES), configures and builds. Tests and
# benchmarks are left out of this build; cpack packages the binary and its docs
# (cmake/MockerPackaging.cmake), and its Depends line is computed by dpkg-shlibdeps.
RUN BUILD_DIR=/src/build-image \
    MOCKER_CMAKE_ARGS="-DMOCKER_BUILD_TESTS=OFF -DMOCKER_BUILD_BENCHMARKS=OFF" \
    scripts/dev build --target mocker \
 && cd /src/build-image && cpack -G DEB && mv mocker_*.deb /tmp/mocker.deb

# ---- run stage: the shared libraries `mocker` links, nothing else --------------------------------
FROM debian:bookworm
# One package per library in the binary's NEEDED list (readelf -d, mapped with dpkg -S); apt
# brings their own dependencies. dpkg -i below fails if the package needs anything not here.
ARG RUNTIME_PACKAGES="libc6 libcpp-httplib0.11 libfmt9 libgcc-s1 libnlopt0 libpcre2-8-0 libspdlog1.10 libssl3 libstdc++6 libtomlplusplus3 libxxhash0 libzmq5"
COPY --from=build /tmp/mocker.deb /tmp/mocker.deb
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${RUNTIME_PACKAGES} \
 && dpkg -i /tmp/mocker.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/mocker.deb \
 && groupadd --system --gid 10001 mocker \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin mocker
COPY deploy/kubernetes/mocker.toml /etc/mocker/mocker.toml
USER 10001:10001
WORKDIR /tmp

# Port plan: submit, cancel, KV events, KV-event replay, forward-pass metrics (the last three are
# per DP rank: rank r uses port + r), `mocker index` queries, HTTP (/metrics, /health, /ready).
EXPOSE 5555 5556 5557 5558 5559 5560 5561 8000

# /ready answers 200 once the service serves, 503 before. The image has no HTTP client, so the
# check is bash's /dev/tcp: one HTTP/1.0 request, healthy only on a 200 status line. Moving the
# HTTP endpoint (--http-endpoint)? Set MOCKER_HEALTH_PORT to its port too (docker run -e).
ENV MOCKER_HEALTH_PORT=8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${MOCKER_HEALTH_PORT} && printf 'GET /ready HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && read -r -t 2 _ status _ <&3 && [ \"$status\" = 200 ]"]

ENTRYPOINT ["mocker"]
CMD ["serve", "--config", "/etc/mocker/mocker.toml"]
