# The streamdedup worker image. Build: docker build -t streamdedup .
# The first stage builds the wheel with `make wheel`, compiled kernels (native/, Rust) included; the image holds no
# compiler.
FROM python:3.11-slim AS build
COPY --from=rust:1.85-slim /usr/local/cargo /usr/local/cargo
COPY --from=rust:1.85-slim /usr/local/rustup /usr/local/rustup
ENV CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup PATH=/usr/local/cargo/bin:$PATH PIP_NO_CACHE_DIR=1
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile pyproject.toml constraints.txt README.md LICENSE MANIFEST.in ./
COPY native ./native
COPY streamdedup ./streamdedup
RUN make wheel PYTHON=python && mkdir /wheels && cp dist/*.whl /wheels/

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY constraints.txt ./
COPY --from=build /wheels /wheels
# The office extra: upserts that carry a PDF or Office file's bytes are converted to text (docs/documents.md).
RUN pip install -c constraints.txt "$(ls /wheels/*.whl)[office]" && rm -rf /wheels && useradd --system --uid 10001 --home /data streamdedup \
    && mkdir -p /data && chown streamdedup /data
USER streamdedup
ENV STREAMDEDUP_DATA_DIR=/data STREAMDEDUP_WEB_HOST=0.0.0.0 STREAMDEDUP_WEB_PORT=6066
EXPOSE 6066
ENTRYPOINT ["streamdedup"]
CMD ["worker"]
