# graphserve images. One Dockerfile, two variants chosen by VARIANT, both with the libtorch of the one
# pinned PyTorch wheel (deploy/toolchain.env) and the CUDA-graph executor compiled in:
#   docker build -t graphserve:cuda .                        CUDA: Ubuntu 24.04 with the CUDA toolkit
#   docker build --build-arg VARIANT=cpu -t graphserve:cpu . CPU: Debian 12 (CUDA's compiler from PyPI)
#   docker run --gpus all -p 8000:8000 -p 8001:8001 -p 127.0.0.1:8002:8002 graphserve:cuda
# Both build stages run the same install and build scripts as the README and CI (.ci/run), and each
# runtime stage installs only the packages whose shared libraries the binaries load.
# --build-arg PIP_INDEX_URL=... points pip at another index; empty uses pip's default.
# --build-arg PIP_CERT=/src/FILE (FILE in the build context) gives pip a CA bundle, for networks
# whose TLS proxy re-signs PyPI's certificates; deploy/docker-cpu-image.sh passes the machine's own.
ARG VARIANT=cuda
ARG CUDA_VERSION=13.0.1

FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04 AS build-cuda
ENV TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0;10.0;12.0"

FROM debian:bookworm AS build-cpu

FROM build-${VARIANT} AS build
ARG PIP_INDEX_URL
ARG PIP_CERT
WORKDIR /src
COPY . .
RUN if [ -z "${PIP_INDEX_URL:-}" ]; then unset PIP_INDEX_URL; fi \
 && if [ -z "${PIP_CERT:-}" ]; then unset PIP_CERT; fi \
 && deploy/install-deps.sh \
 && BUILD_TYPE=Release deploy/build.sh -DGRAPHSERVE_BUILD_TESTS=OFF \
 && mkdir -p /stage/usr/local/bin \
 && cp build/server/graphserve build/client/graphserve-cli build/client/graphserve-loadgen \
      /stage/usr/local/bin/ \
 && deploy/install-deps.sh --list-runtime /stage/usr/local/bin/* \
      > /runtime-packages
# libtorch and the CUDA libraries the wheel depends on are not packages: copy their shared libraries
# only, at the same paths, so that the binaries' and torch's RPATHs hold (several GB, in both
# variants: the binaries link libtorch_cuda, which loads without a GPU).
RUN . deploy/toolchain.env \
 && site=$("$GRAPHSERVE_VENV/bin/python3" -c 'import site; print(site.getsitepackages()[0])') \
 && cd / && find "$site/torch/lib" "$site/nvidia" -name '*.so*' -print0 \
    | xargs -0 cp --parents -a -t /stage

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
# KServe v2 over HTTP/REST, gRPC (KServe v2, grpc.health.v1) and Prometheus /metrics: the server's
# default ports (server.h), Triton's numbers.
EXPOSE 8000 8001 8002
VOLUME ["/models"]
# ServerLive and ServerReady; the start period covers model warm-up and CUDA graph capture. Shell form,
# so that the variables expand when the check runs (exec: Docker's timeout then kills the probe itself):
# GRAPHSERVE_HEALTH_ADDRESS for another --grpc-address, GRAPHSERVE_HEALTH_ARGS (split on spaces) for TLS
# or --auth-health, e.g. "--tls-ca-file /tls/ca.pem --auth-token-file /run/secrets/token". Unset: the
# plaintext probe of 127.0.0.1:8001.
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s \
  CMD exec graphserve-cli health --address "${GRAPHSERVE_HEALTH_ADDRESS:-127.0.0.1:8001}" --timeout-ms 3000 \
      ${GRAPHSERVE_HEALTH_ARGS:-}
# An empty /models volume serves the built-in encoder; extra arguments go to graphserve. exec: the
# server is PID 1 and gets `docker stop`'s SIGTERM itself, and drains (--drain-timeout-s).
ENTRYPOINT ["/bin/sh", "-c", "if [ -n \"$(ls -A /models 2>/dev/null)\" ]; then exec graphserve --model-repository /models \"$@\"; else exec graphserve \"$@\"; fi", "graphserve"]
