"""The monitoring settings of the stack config: where alerts go, and when "no new step" alerts.

Checked with the rest of the config (config_checks.cross_field_problems), each problem naming
the key, the value as given and the fix.
"""

from __future__ import annotations

import re
from typing import Protocol

from components.messages import quoted
from components.forms.pulumi_forms import Key

CHANNEL_KEY = Key("alertNotificationChannel")  # under the project's name
NO_STEP_KEY = Key("noStepAlertMinutes")
# A notification channel's resource name (Monitoring API v3 projects.notificationChannels).
_CHANNEL = re.compile(r"projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/notificationChannels/[0-9]+")
# MetricAbsence.duration is at least 120 s (monitoring.v3.json); past a day the alert says
# nothing a person watching the run would not have noticed.
NO_STEP_MINUTES = (2, 1440)


class _Settings(Protocol):
    alert_notification_channel: str | None
    no_step_alert_minutes: int


def observability_problems(config: _Settings) -> list[str]:
    problems = []
    channel = config.alert_notification_channel
    if channel is not None and not _CHANNEL.fullmatch(channel):
        problems.append(
            f"{CHANNEL_KEY} = {quoted(channel)} is not a notification channel name: use "
            "projects/<project>/notificationChannels/<id> (`gcloud beta monitoring channels "
            "list --format='value(name)'` prints them), or leave it unset for alerts without "
            "notifications"
        )
    low, high = NO_STEP_MINUTES
    minutes = config.no_step_alert_minutes
    if not low <= minutes <= high:
        problems.append(
            f"{NO_STEP_KEY} = {quoted(minutes)} is out of range: use {low} to {high} minutes "
            "(Cloud Monitoring needs at least 2 minutes without data to call a metric absent)"
        )
    return problems
