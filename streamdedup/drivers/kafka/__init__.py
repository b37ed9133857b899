"""The Kafka driver: a worker group applies the engine's stages to topic partitions, state in partition stores."""

__all__: list[str] = []
