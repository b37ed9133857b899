"""The event contract (design §4): the codec between wire events and the engine's values
(:mod:`~streamdedup.contract.codec`), and the JSON Schemas of every event (``schemas/``)."""
