# graphserve, CPU image (Debian 12 with Debian's libtorch). A later issue adds the CUDA image.
#   docker build -t graphserve:cpu .
#   docker run -p 8001:8001 -p 8002:8002 graphserve:cpu
# The build stage runs the same install and build scripts as the README and CI.
FROM debian:bookworm AS build
WORKDIR /src
COPY . .
RUN deploy/install-deps.sh && BUILD_TYPE=Release deploy/build.sh -DGRAPHSERVE_BUILD_TESTS=OFF

FROM debian:bookworm-slim AS runtime
COPY --from=build /src/deploy/install-deps.sh /usr/local/share/graphserve/install-deps.sh
RUN /usr/local/share/graphserve/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/server/graphserve /src/build/client/graphserve-cli /usr/local/bin/
RUN useradd --system --uid 10001 graphserve && mkdir -p /models && chown graphserve /models
USER graphserve
EXPOSE 8001 8002
VOLUME ["/models"]
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s \
  CMD ["graphserve-cli", "health", "--address", "127.0.0.1:8001", "--timeout-ms", "3000"]
# An empty /models volume serves the built-in encoder; extra arguments go to graphserve.
ENTRYPOINT ["/bin/sh", "-c", "if [ -n \"$(ls -A /models 2>/dev/null)\" ]; then exec graphserve --model-repository /models \"$@\"; else exec graphserve \"$@\"; fi", "graphserve"]
