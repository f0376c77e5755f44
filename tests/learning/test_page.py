"""The pipeline page shows the draft versions and their acceptance once learning is on."""

from __future__ import annotations

from django.urls import reverse

from inference.learning import services
from inference.learning.models import DraftVersion


def test_the_pipeline_page_lists_draft_versions_with_acceptance(client, learning, viewer, operator):
    client.force_login(viewer)
    page = client.get(reverse("console:pipeline", args=[learning.pk]))
    assert page.status_code == 200 and b'id="draft-versions"' not in page.content  # off: no table
    services.learning_configure(pipeline_id=learning.pk, actor=operator, changes={"enabled": True})
    v1 = DraftVersion.objects.create(
        pipeline=learning,
        number=1,
        status="promoted",
        canary_acceptance=0.61234,
        baseline_acceptance=0.4,
        train_pairs=40,
    )
    DraftVersion.objects.create(pipeline=learning, number=2, parent=v1, status="rejected")
    html = client.get(reverse("console:pipeline", args=[learning.pk])).content.decode()
    assert 'id="draft-versions"' in html and "canary 20 % of sequences" in html
    assert 'data-draft-version="1"' in html and "0.612" in html and "Promoted" in html
    assert "from v1" in html and "Rejected" in html
