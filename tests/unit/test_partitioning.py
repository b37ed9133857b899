from aiokafka.partitioner import murmur2 as kafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core import _native
from streamdedup.core.partitioning import murmur2, partition_for, positive_murmur2


@given(st.binary(max_size=64))
def test_murmur2_matches_the_kafka_client(data):
    assert murmur2(data) & 0xFFFFFFFF == kafka_murmur2(data) & 0xFFFFFFFF


@given(st.text(max_size=40), st.integers(1, 64))
def test_partition_is_in_range_and_stable(key, partitions):
    p = partition_for(key, partitions)
    assert 0 <= p < partitions and p == partition_for(key, partitions)


def test_known_value_from_the_java_client():
    # org.apache.kafka.common.utils.Utils.murmur2("21".getBytes()) == -973932308
    assert murmur2(b"21") == -973932308


@given(st.text(max_size=80), st.integers(2, 64))
def test_the_compiled_partitioner_agrees_with_murmur2(key, partitions):
    data = key.encode("utf-8")
    assert _native.positive_murmur2(data) == murmur2(data) & 0x7FFFFFFF == positive_murmur2(data)
    assert partition_for(key, partitions) == (murmur2(data) & 0x7FFFFFFF) % partitions
