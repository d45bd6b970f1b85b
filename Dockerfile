# graphserve images. One Dockerfile, two variants chosen by VARIANT:
#   docker build -t graphserve:cuda .                        CUDA: Ubuntu 24.04, libtorch of a pinned
#                                                            PyTorch wheel (install-deps.sh), CUDA graphs
#   docker build --build-arg VARIANT=cpu -t graphserve:cpu . CPU: Debian 12 with Debian's libtorch
#   docker run --gpus all -p 8001:8001 -p 8002:8002 graphserve:cuda
# Both build stages run the same install and build scripts as the README and CI (.ci/run), and each
# runtime stage installs only the packages whose shared libraries the binaries load.
ARG VARIANT=cuda
ARG CUDA_VERSION=13.0.1

FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04 AS build-cuda
# install-deps.sh puts the wheel's venv here; build.sh takes libtorch from it.
ENV TORCH_PYTHON=/opt/graphserve-torch/bin/python3 \
    TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0;10.0;12.0"

FROM debian:bookworm AS build-cpu

FROM build-${VARIANT} AS build
# The CUDA variant's wheel; empty keeps install-deps.sh's pinned defaults (2.11.0, cu130 index).
ARG TORCH_VERSION
ARG TORCH_INDEX_URL
WORKDIR /src
COPY . .
RUN deploy/install-deps.sh \
 && BUILD_TYPE=Release deploy/build.sh -DGRAPHSERVE_BUILD_TESTS=OFF \
 && mkdir -p /stage/usr/local/bin \
 && cp build/server/graphserve build/client/graphserve-cli build/client/graphserve-loadgen \
      /stage/usr/local/bin/ \
 && deploy/install-deps.sh --list-runtime /stage/usr/local/bin/* \
      > /runtime-packages
# The CUDA variant's libtorch and the CUDA libraries the wheel depends on are not packages: copy
# their shared libraries only, at the same paths, so that the binaries' and torch's RPATHs hold.
RUN if [ -n "${TORCH_PYTHON:-}" ]; then \
      site=$("$TORCH_PYTHON" -c 'import site; print(site.getsitepackages()[0])') \
      && cd / && find "$site/torch/lib" "$site/nvidia" -name '*.so*' -print0 \
         | xargs -0 cp --parents -a -t /stage; \
    fi

FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu24.04 AS runtime-cuda
FROM debian:bookworm-slim AS runtime-cpu

FROM runtime-${VARIANT} AS runtime
COPY deploy/install-deps.sh /usr/local/share/graphserve/install-deps.sh
COPY --from=build /runtime-packages /usr/local/share/graphserve/runtime-packages
RUN /usr/local/share/graphserve/install-deps.sh --runtime /usr/local/share/graphserve/runtime-packages \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /stage/ /
RUN useradd --system --uid 10001 graphserve && mkdir -p /models && chown graphserve /models
USER graphserve
# gRPC (KServe v2, grpc.health.v1) and Prometheus /metrics: the server's default ports (server.h).
EXPOSE 8001 8002
VOLUME ["/models"]
# ServerLive and ServerReady; the start period covers model warm-up and CUDA graph capture.
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s \
  CMD ["graphserve-cli", "health", "--address", "127.0.0.1:8001", "--timeout-ms", "3000"]
# An empty /models volume serves the built-in encoder; extra arguments go to graphserve. exec: the
# server is PID 1 and gets `docker stop`'s SIGTERM itself, and drains (--drain-timeout-s).
ENTRYPOINT ["/bin/sh", "-c", "if [ -n \"$(ls -A /models 2>/dev/null)\" ]; then exec graphserve --model-repository /models \"$@\"; else exec graphserve \"$@\"; fi", "graphserve"]
