"""Actors as tasks on the virtual clock: one thread each, exactly one running at a time.

The provider (an engine operation) and every CronJob tick run their real code in a thread of
their own. A task runs until it sleeps or does I/O (both go through the clock); it is then
parked until the clock reaches its wake-up time, and the scheduler (the caller's thread) runs
whatever is due first: a driver's log line, a pod becoming ready, another actor's next call.
So any call of one actor can fall between any two calls of the other, in both directions,
and a run is still deterministic: the order is (time, sequence) and nothing runs in parallel.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


class Cancelled(BaseException):
    """Raised in a parked task when the world is torn down."""


class Task:
    def __init__(self, scheduler: "Scheduler", name: str, body: Callable[[], Any],
                 actor: Any) -> None:
        self.scheduler, self.name, self.body, self.actor = scheduler, name, body, actor
        self.go = threading.Semaphore(0)
        self.done = False
        self.cancelled = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"sim-{name}", daemon=True)

    def _main(self) -> None:
        self.go.acquire()
        self.scheduler.local.task = self
        try:
            if self.cancelled:
                raise Cancelled()
            self.result = self.body()
        except BaseException as error:  # noqa: BLE001  handed to whoever waits for the task
            self.error = error
        finally:
            self.done = True
            self.scheduler.back.release()


class Scheduler:
    def __init__(self) -> None:
        self.local = threading.local()
        self.back = threading.Semaphore(0)
        self.tasks: list[Task] = []

    def current(self) -> Task | None:
        return getattr(self.local, "task", None)

    def spawn(self, name: str, body: Callable[[], Any], actor: Any) -> Task:
        task = Task(self, name, body, actor)
        self.tasks.append(task)
        task.thread.start()
        return task

    def resume(self, task: Task) -> None:
        """Run `task` until it parks or ends (called from the scheduler's thread)."""
        if task.done:
            return
        task.go.release()
        self.back.acquire()

    def park(self) -> None:
        """Called by the running task: hand control back until resumed."""
        task = self.current()
        assert task is not None
        if task.cancelled:
            raise Cancelled()
        self.back.release()
        task.go.acquire()
        if task.cancelled:
            raise Cancelled()

    def cancel_all(self) -> None:
        for task in self.tasks:
            if not task.done:
                task.cancelled = True
                task.go.release()
                self.back.acquire()
        self.tasks.clear()
