"""Mounting the dedup worker in a Faust app of your own: the documented import path.

:mod:`streamdedup.drivers.kafka.mounted` holds it.

>>> from streamdedup.faust import mount
>>> mount.__module__
'streamdedup.drivers.kafka.mounted'
"""

from streamdedup.drivers.kafka.mounted import MountedWorker, mount

__all__ = ["MountedWorker", "mount"]
