import subprocess
import sys


def test_core_imports_no_kafka_faust_or_rocksdb():
    code = (
        "import sys, streamdedup.core, streamdedup.core.engine, streamdedup.core.stages, streamdedup.core.view; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('faust', 'aiokafka', 'rocksdict', 'mode', 'kafka'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_core_does_no_io():
    # The core's modules import nothing that opens files, sockets or processes.
    code = (
        "import sys; before = set(sys.modules); import streamdedup.core.engine; "
        "print(' '.join(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in "
        "('socket', 'asyncio', 'subprocess', 'sqlite3', 'http', 'urllib3', 'requests'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
