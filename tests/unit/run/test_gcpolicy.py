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


def test_a_cycle_left_by_a_stopped_flow_is_collected_while_the_others_copy():
    # A flow worker is a cycle: its producers' error_cb is `lambda err: self.reports...`
    # (engine/worker.py), so a worker a reload stopped holds its librdkafka producers (threads,
    # connections) until a collection finds it. A copying loop frees what each batch makes:
    # the net allocation count climbs within a batch and falls back, so batches under 50,000
    # objects never start a young collection, however many of them run.
    import weakref

    class Worker:
        def __init__(self) -> None:
            self.error_cb = lambda err: self.on_error(err)

        def on_error(self, err: object) -> None:
            pass

    before = gc.get_threshold()
    try:
        gcpolicy.settle()
        stopped = Worker()
        gone = weakref.ref(stopped)
        del stopped
        for _ in range(500):  # 500 batches of 10,000 records, two containers each
            batch = [[i, (i,)] for i in range(10_000)]
            del batch
        assert gone() is None, "a stopped flow's cycle outlived 10M allocations of copying"
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
