import gc
import weakref

from mirror.run import gcpolicy


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_while_flows_run_allocations_start_no_collection_and_leaving_restores_the_collector():
    before = gc.get_threshold()
    with gcpolicy.CollectionSchedule(_Clock()):
        assert gc.get_threshold() == (gcpolicy.YOUNG, gcpolicy.MIDDLE, gcpolicy.OLD)
        assert gc.get_freeze_count() > 0  # this test's own module, at least, was alive at set-up
        assert gc.isenabled(), "cycles are still collected, on the clock"
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_cycle_left_by_a_stopped_flow_is_collected_while_the_others_copy():
    # A flow worker is a cycle: its producers' error_cb is `lambda err: self.reports...`
    # (engine/worker.py), so a worker a reload stopped holds its librdkafka producers (threads,
    # connections) until a collection finds it. A copying loop frees what each batch makes:
    # the net allocation count climbs within a batch and falls back, so batches under 50,000
    # objects never start a young collection, however many of them run.
    class Worker:
        def __init__(self) -> None:
            self.error_cb = lambda err: self.on_error(err)

        def on_error(self, err: object) -> None:
            pass

    clock = _Clock()
    with gcpolicy.CollectionSchedule(clock) as schedule:
        stopped = Worker()
        gone = weakref.ref(stopped)
        del stopped
        for _ in range(500):  # 500 batches of 10,000 records, two containers each
            batch = [[i, (i,)] for i in range(10_000)]
            del batch
            clock.now += 0.01  # five seconds of copying in all
            schedule.tick()
        assert gone() is None, "a stopped flow's cycle outlived five seconds of copying"


def test_the_old_generation_is_collected_every_minute():
    clock = _Clock()
    with gcpolicy.CollectionSchedule(clock) as schedule:
        counts = []
        for _ in range(130):
            clock.now += 1.0
            before = gc.get_stats()[2]["collections"]
            schedule.tick()
            counts.append(gc.get_stats()[2]["collections"] - before)
        assert sum(counts) == 2  # at 60 s and 120 s
