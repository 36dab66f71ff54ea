"""The helper of Horovod 0.28.1's test/utils/common.py that test_timeline.py imports, temppath(),
unchanged (Apache License 2.0, see tests/horovod/LICENSE); the rest of that file needs Horovod's
runner."""
import contextlib
import os
import tempfile


@contextlib.contextmanager
def temppath():
    dir_path = tempfile.TemporaryDirectory()
    path = os.path.join(dir_path.name,'temp_test_file')
    try:
        yield path
    finally:
        dir_path.cleanup()
