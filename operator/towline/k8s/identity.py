"""Who this process is to the API server (SelfSubjectReview): recorded as a webhook run's requester."""

from __future__ import annotations

from towline.k8s.client import KubeApi

SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


async def whoami(api: KubeApi) -> str:
    review = await api.request("POST", SELF_SUBJECT_REVIEWS, body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
    })
    username: str = review["status"]["userInfo"]["username"]
    return username
