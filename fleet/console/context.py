"""Template context for every console page: the supervisor's problems, for signed-in users
who may view the fleet (a child of `manage.py up` restarting or given up on)."""

from django.conf import settings

from fleet.accounts.access import can
from fleet.runtime.supervision import problems


def supervision(request):
    if not can(getattr(request, "user", None), "view"):
        return {}
    return {"supervisor_problems": problems(settings.DATA_DIR)}


# The navigation's sections by path prefix, most specific first: /planner/pipelines/3/ is the
# planner's page, not a pipeline's (a substring test lit both).
NAV_SECTIONS = (
    ("/planner/", "planner"),
    ("/fleet/", "fleet"),
    ("/nodes/", "nodes"),
    ("/pipelines/", "pipelines"),
    ("/wall/", "wall"),
    ("/alerts/", "alerts"),
    ("/account/keys/", "keys"),
    ("/api/v1/docs/", "api-docs"),
)


def nav_section(path: str) -> str:
    for prefix, section in NAV_SECTIONS:
        if path.startswith(prefix):
            return section
    return "home" if path == "/" else ""


def nav(request):
    return {"nav_section": nav_section(getattr(request, "path", "") or "")}
