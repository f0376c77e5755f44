"""Template context for every console page: the supervisor's problems, for signed-in users
who may view the fleet (a child of `manage.py up` restarting or given up on)."""

from django.conf import settings

from fleet.accounts.access import can
from fleet.supervision import problems


def supervision(request):
    if not can(getattr(request, "user", None), "view"):
        return {}
    return {"supervisor_problems": problems(settings.DATA_DIR)}
