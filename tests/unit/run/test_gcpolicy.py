import gc

from mirror.run import gcpolicy


def test_settle_freezes_what_set_up_left_and_spaces_young_collections():
    before = gc.get_threshold()
    try:
        gcpolicy.settle()
        assert gc.get_threshold() == (gcpolicy.YOUNG, gcpolicy.MIDDLE, gcpolicy.OLD)
        assert gc.get_freeze_count() > 0  # this test's own module, at least, was alive at set-up
        assert gc.isenabled(), "cycles are still collected, only less often"
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
