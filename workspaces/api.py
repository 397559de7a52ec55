"""REST API of workspaces (docs/workspaces.md "API"). Thin: the access helper and one service call.

List, retrieve, create (and its dry run) and the reading actions are every kind's
(:class:`workloads.api.WorkloadViewSet`); a workspace adds ``pause/``, ``resume/``, ``open/`` and
``share/``, and ``DELETE`` deletes it with its home volume.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.exceptions import conflict_response
from teams.models import Role
from workloads.api import WorkloadViewSet, create_schema, list_parameters
from workspaces import services
from workspaces.constants import WorkspaceState
from workspaces.models import Workspace
from workspaces.serializers import OpenSerializer, ShareSerializer, WorkspaceCreateSerializer, WorkspaceSerializer


@extend_schema_view(list=extend_schema(parameters=list_parameters(WorkspaceState.values)),
                    create=create_schema(WorkspaceCreateSerializer, WorkspaceSerializer))
class WorkspaceViewSet(WorkloadViewSet):
    """GPU notebooks of the caller's teams: create, read, pause, resume, open, delete."""

    model = Workspace
    serializer_class = WorkspaceSerializer
    http_method_names = ["get", "post", "delete", "head", "options"]

    def _act(self, request, act, code=status.HTTP_200_OK):
        workspace = self.get_object(Role.MEMBER)
        try:
            workspace = act(request.user, workspace)
        except services.WorkspaceConflict as exc:
            return conflict_response(str(exc))
        return Response(self.serialize(services.get_workspace_for_user(request.user, workspace.pk)), status=code)

    @extend_schema(request=None, responses={202: WorkspaceSerializer})
    def destroy(self, request, *args, **kwargs):
        """Delete it with its home volume (the CLI and the portal ask first, naming the volume's size)."""
        return self._act(request, services.delete_workspace, status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: WorkspaceSerializer})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        """Pause it: its pods deleted, its quota released, its home volume kept (409 unless it holds quota)."""
        return self._act(request, services.pause_by_user)

    @extend_schema(request=None, responses={200: WorkspaceSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        """Resume it through admission: admitted, or queued with the usual reason and start estimate."""
        return self._act(request, services.resume)

    @extend_schema(request=ShareSerializer, responses={200: WorkspaceSerializer})
    @action(detail=True, methods=["post"])
    def share(self, request, pk=None):
        """Let the team's admins open it too, or no longer (its owner only)."""
        workspace = self.get_object(Role.MEMBER)  # 404 outside the team before a word about the body
        serializer = ShareSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.set_shared(request.user, workspace, serializer.validated_data["shared_with_admins"])
        return Response(self.serialize(services.get_workspace_for_user(request.user, workspace.pk)))

    @extend_schema(responses={200: OpenSerializer, 409: OpenApiResponse(
        response=inline_serializer("NotOpen", {"errors": serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()))}),
        description="It does not run: there is no server to open (yet)")})
    @action(detail=True, methods=["get"], url_path="open", url_name="open")
    def open_server(self, request, pk=None):
        """The way into its Jupyter server, for its owner (and the team's admins it is shared with): its own host's
        address with a one-use ticket (:func:`workspaces.services.open_url`). 403 for a teammate, 404 outside the
        team, 409 while it does not run. Never listed or logged; the opening is audited without the address."""
        workspace = self.get_object()
        try:
            url = services.open_url(request.user, workspace)
        except services.NotOpen as exc:
            return conflict_response(str(exc))
        response = Response({"url": url})
        response["Cache-Control"] = "no-store"
        return response


