"""The Kafka driver: the engine's stages as Faust agents over Kafka topics, with state in Faust tables."""

__all__: list[str] = []
