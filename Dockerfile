# The streamdedup worker image. Build: docker build -t streamdedup .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml constraints.txt README.md LICENSE ./
COPY streamdedup ./streamdedup
RUN pip install -c constraints.txt . && useradd --system --uid 10001 --home /data streamdedup \
    && mkdir -p /data && chown streamdedup /data
USER streamdedup
ENV STREAMDEDUP_DATA_DIR=/data STREAMDEDUP_WEB_HOST=0.0.0.0 STREAMDEDUP_WEB_PORT=6066
EXPOSE 6066
ENTRYPOINT ["streamdedup"]
CMD ["worker"]
