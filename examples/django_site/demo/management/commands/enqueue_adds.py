"""`manage.py enqueue_adds COUNT [--rollback]`: enqueue COUNT `add` tasks in one
transaction (rolled back with --rollback) and print, as JSON, the result ids and the
broker messages sent (the acceptance tests read it)."""

import json

from django.core.management.base import BaseCommand
from django.db import transaction

from cronjobs.contrib.django import connect
from demo import tasks


class Rollback(Exception):
    """Raised to roll the transaction back."""


class Command(BaseCommand):
    help = "Enqueue COUNT add tasks in one transaction; print their ids and the messages sent."

    def add_arguments(self, parser):
        parser.add_argument("count", type=int)
        parser.add_argument("--rollback", action="store_true")

    def handle(self, count, rollback, **options):
        broker = connect.get_app().broker
        sent = []
        stop = broker.listen(lambda *message: sent.append(message))
        ids = []
        try:
            with transaction.atomic():
                ids = [tasks.add.enqueue(i, i).id for i in range(count)]
                if rollback:
                    raise Rollback
        except Rollback:
            pass
        broker.flush()
        stop()
        self.stdout.write(json.dumps({"ids": ids, "sent": len(sent)}))
