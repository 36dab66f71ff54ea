"""`horovod` as ranktime: a module that only renames, so that Horovod's own tests (copied
unchanged under tests/horovod) run on ranktime. Nothing here computes anything."""
