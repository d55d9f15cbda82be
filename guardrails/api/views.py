"""Tenant API for guardrails: /api/guardrails (the account's own, and the operator's listed
read-only) and /api/guardrail-attachments. Members read; owners and admins write. A tenant
never detaches what the operator attached, nor changes a guardrail the operator attached
(403): guardrails/services.py decides, these views translate."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.fields import account_or_404
from accounts.api.permissions import require_manager
from accounts.api.schema import error_responses
from accounts.models import ApiKey, Group
from accounts.selectors import accounts_of_user
from audit.actors import request_actor
from guardrails import services
from guardrails.api.serializers import (
    ATTACHMENT_ID,
    GUARDRAIL_ID,
    AttachmentIn,
    AttachmentOut,
    AttachmentPage,
    GuardrailCreatedOut,
    GuardrailIn,
    GuardrailOut,
    GuardrailPage,
    GuardrailUpdateIn,
    pk_of,
)
from guardrails.models import Guardrail, GuardrailAttachment
from guardrails.rules import GuardrailInvalid
from guardrails.selectors import guardrails_visible

TAGS = ["guardrails"]


def _invalid(exc: GuardrailInvalid) -> serializers.ValidationError:
    return serializers.ValidationError({exc.field: [exc.message]})


def _refused(exc: services.GuardrailRefused) -> exceptions.PermissionDenied:
    return exceptions.PermissionDenied(str(exc))


def _guardrails(request: Request) -> QuerySet[Guardrail]:
    return guardrails_visible(accounts_of_user(user=request.user).values("pk"))


def _attachments(request: Request) -> QuerySet[GuardrailAttachment]:
    mine = accounts_of_user(user=request.user).values("pk")
    return GuardrailAttachment.objects.filter(account_id__in=mine).select_related("guardrail")


class GuardrailListView(APIView):
    @extend_schema(
        operation_id="guardrails_list",
        tags=TAGS,
        summary="The guardrails of the caller's accounts and the operator's (read-only)",
        responses={200: GuardrailPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        rows = _guardrails(request).order_by("id")
        return Response({"results": GuardrailOut(rows, many=True).data})

    @extend_schema(
        operation_id="guardrails_create",
        tags=TAGS,
        summary="Define a custom or webhook guardrail (a webhook's secret is in this answer only)",
        request=GuardrailIn,
        responses={201: GuardrailCreatedOut, **error_responses(400, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        data = GuardrailIn(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        account = account_or_404(request, fields.pop("account", None))
        require_manager(user=request.user, account=account)
        try:
            guardrail, secret = services.guardrail_create(
                account=account, actor=request_actor(request), **fields
            )
        except GuardrailInvalid as exc:
            raise _invalid(exc) from None
        body = GuardrailOut(guardrail).data
        if secret is not None:
            body = {**body, "secret": secret}
        return Response(body, status=status.HTTP_201_CREATED)


class _OneGuardrail(APIView):
    def _row(self, request: Request, guardrail_id: str) -> Guardrail:
        pk = pk_of(guardrail_id, GUARDRAIL_ID)
        row = _guardrails(request).filter(pk=pk).first() if pk else None
        if row is None:
            raise Http404
        return row

    def _managed(self, request: Request, guardrail_id: str) -> Guardrail:
        guardrail = self._row(request, guardrail_id)
        if guardrail.account is None:
            raise exceptions.PermissionDenied(
                "The operator's guardrails are changed by the operator only."
            )
        require_manager(user=request.user, account=guardrail.account)
        return guardrail


class GuardrailDetailView(_OneGuardrail):
    @extend_schema(
        operation_id="guardrails_retrieve",
        tags=TAGS,
        summary="One guardrail",
        responses={200: GuardrailOut, **error_responses(404)},
    )
    def get(self, request: Request, guardrail_id: str) -> Response:
        return Response(GuardrailOut(self._row(request, guardrail_id)).data)

    @extend_schema(
        operation_id="guardrails_update",
        tags=TAGS,
        summary="Change an own guardrail (not its kind); not one the operator attached",
        request=GuardrailUpdateIn,
        responses={200: GuardrailOut, **error_responses(400, 403, 404)},
    )
    def patch(self, request: Request, guardrail_id: str) -> Response:
        guardrail = self._managed(request, guardrail_id)
        data = GuardrailUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        try:
            guardrail = services.guardrail_update(
                guardrail=guardrail, actor=request_actor(request), **data.validated_data
            )
        except GuardrailInvalid as exc:
            raise _invalid(exc) from None
        except services.GuardrailRefused as exc:
            raise _refused(exc) from None
        return Response(GuardrailOut(guardrail).data)

    @extend_schema(
        operation_id="guardrails_destroy",
        tags=TAGS,
        summary="Delete an own guardrail with its attachments; not one the operator attached",
        request=None,
        responses={204: None, **error_responses(403, 404)},
    )
    def delete(self, request: Request, guardrail_id: str) -> Response:
        guardrail = self._managed(request, guardrail_id)
        try:
            services.guardrail_delete(guardrail=guardrail, actor=request_actor(request))
        except services.GuardrailRefused as exc:
            raise _refused(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class GuardrailRotateView(_OneGuardrail):
    @extend_schema(
        operation_id="guardrails_rotate_secret",
        tags=TAGS,
        summary="Give an own webhook guardrail a new signing secret (shown once; the old one"
        " stops at once)",
        request=None,
        responses={200: GuardrailCreatedOut, **error_responses(400, 403, 404)},
    )
    def post(self, request: Request, guardrail_id: str) -> Response:
        guardrail = self._managed(request, guardrail_id)
        try:
            secret = services.guardrail_rotate_secret(
                guardrail=guardrail, actor=request_actor(request)
            )
        except GuardrailInvalid as exc:
            raise _invalid(exc) from None
        return Response({**GuardrailOut(guardrail).data, "secret": secret})


class AttachmentListView(APIView):
    @extend_schema(
        operation_id="guardrail_attachments_list",
        tags=TAGS,
        summary="Where guardrails apply in the caller's accounts (the operator's too)",
        responses={200: AttachmentPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        rows = _attachments(request).order_by("id")
        return Response({"results": AttachmentOut(rows, many=True).data})

    @extend_schema(
        operation_id="guardrail_attachments_create",
        tags=TAGS,
        summary="Attach an own or operator guardrail to the account, a group or a key",
        request=AttachmentIn,
        responses={201: AttachmentOut, **error_responses(400, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        data = AttachmentIn(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        account = account_or_404(request, fields.get("account"))
        require_manager(user=request.user, account=account)
        pk = pk_of(fields["guardrail"], GUARDRAIL_ID)
        guardrail = _guardrails(request).filter(pk=pk).first() if pk else None
        if guardrail is None:
            raise serializers.ValidationError({"guardrail": ["A guardrail id (grd_<n>)."]})
        group = api_key = None
        if "group" in fields:
            group = Group.objects.filter(account=account, pk=fields["group"]).first()
            if group is None:
                raise serializers.ValidationError({"group": ["A group of this account."]})
        if "api_key" in fields:
            api_key = ApiKey.objects.filter(group__account=account, pk=fields["api_key"]).first()
            if api_key is None:
                raise serializers.ValidationError({"api_key": ["A key of this account."]})
        try:
            attachment = services.attachment_create(
                guardrail=guardrail,
                account=account,
                group=group,
                api_key=api_key,
                actor=request_actor(request),
            )
        except GuardrailInvalid as exc:
            raise _invalid(exc) from None
        return Response(AttachmentOut(attachment).data, status=status.HTTP_201_CREATED)


class AttachmentDetailView(APIView):
    @extend_schema(
        operation_id="guardrail_attachments_destroy",
        tags=TAGS,
        summary="Detach a guardrail; not what the operator attached",
        request=None,
        responses={204: None, **error_responses(403, 404)},
    )
    def delete(self, request: Request, attachment_id: str) -> Response:
        pk = pk_of(attachment_id, ATTACHMENT_ID)
        attachment = _attachments(request).filter(pk=pk).first() if pk else None
        if attachment is None:
            raise Http404
        require_manager(user=request.user, account=attachment.account)
        try:
            services.attachment_delete(attachment=attachment, actor=request_actor(request))
        except services.GuardrailRefused as exc:
            raise _refused(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)
