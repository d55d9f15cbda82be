"""Tenant API for an account's members: list, invite (a one-time link), change a role, remove;
and the directory roles that SSO and SCIM groups give them.

The dashboard's rules (dashboard/views.py members, member_role, member_remove): every member
reads the list; only the account's owners invite, change roles and remove; the last owner
stays. A refused change is a 409 (LM-2009): the request is well formed, it conflicts with the
account's current state (its last owner, a username already taken).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import directory, members
from accounts.api.errors import Conflict
from accounts.api.fields import account_or_404, id_of
from accounts.api.schema import error_responses
from accounts.logins import password_link_url
from accounts.models import Account, Membership
from accounts.selectors import membership_role
from audit.actors import request_actor

ROLE_HELP = "owner: everything, members included; admin: keys, groups, team keys; viewer: reads."


class MemberOut(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    email = serializers.CharField(source="user.email", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "account", "username", "email", "role"]


class MemberInvitedOut(MemberOut):
    link = serializers.CharField(
        read_only=True,
        help_text="The one-time link at which the person sets a password: in this answer only.",
    )

    class Meta(MemberOut.Meta):
        fields = [*MemberOut.Meta.fields, "link"]


class MemberPage(serializers.Serializer):
    results = MemberOut(many=True)


class MemberInviteIn(serializers.Serializer):
    account = id_of(Account, required=False, help_text="Default: the caller's first account.")
    username = serializers.CharField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="A new sign-in name: letters, digits and @ . + - _ only.",
    )
    email = serializers.EmailField(required=False, allow_blank=True, default="")
    role = serializers.ChoiceField(
        choices=Membership.Role.choices, default=Membership.Role.VIEWER, help_text=ROLE_HELP
    )


class MemberRoleIn(serializers.Serializer):
    role = serializers.ChoiceField(choices=Membership.Role.choices, help_text=ROLE_HELP)


class MemberListIn(serializers.Serializer):
    account = id_of(Account, required=False, help_text="Default: the caller's first account.")


def require_owner(*, user, account: Account) -> None:
    """Refuse (403) anyone but an owner: members and roles are the owners' to change, as on
    the dashboard (dashboard/access.py require_owner)."""
    if membership_role(user=user, account=account) != Membership.Role.OWNER:
        raise PermissionDenied("Only the account's owners may change its members.")


def member_or_404(request: Request, member_id: int) -> Membership:
    """A membership of one of the caller's accounts; 404 for any other (it confirms nothing)."""
    mine = Membership.objects.filter(account__memberships__user=request.user)
    return get_object_or_404(mine.select_related("user", "account"), pk=member_id)


def members_of_account(account: Account):
    return Membership.objects.filter(account=account).select_related("user").order_by("id")


class MemberListView(APIView):
    @extend_schema(
        operation_id="members_list",
        tags=["members"],
        summary="The members of an account (`account`, else the caller's first)",
        parameters=[MemberListIn],
        responses={200: MemberPage, **error_responses(400, 404)},
    )
    def get(self, request):
        query = MemberListIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        account = account_or_404(request, query.validated_data.get("account"))
        return Response({"results": MemberOut(members_of_account(account), many=True).data})

    @extend_schema(
        operation_id="members_invite",
        tags=["members"],
        summary="Invite a person (owners only): answers the one-time set-password link, once",
        request=MemberInviteIn,
        responses={201: MemberInvitedOut, **error_responses(400, 403, 404, 409)},
    )
    def post(self, request):
        data = MemberInviteIn(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        account = account_or_404(request, fields.pop("account", None))
        require_owner(user=request.user, account=account)
        try:
            invited = members.membership_invite(
                account=account, actor=request_actor(request), **fields
            )
        except members.MembershipRefused as exc:
            raise Conflict(str(exc)) from exc
        out = MemberInvitedOut(invited).data
        base_url = settings.PUBLIC_URL or request.build_absolute_uri("/")
        out["link"] = password_link_url(user=invited.user, base_url=base_url)
        return Response(out, status=status.HTTP_201_CREATED)


class MemberDetailView(APIView):
    @extend_schema(
        operation_id="members_set_role",
        tags=["members"],
        summary="Change a member's role (owners only; the last owner stays: 409)",
        request=MemberRoleIn,
        responses={200: MemberOut, **error_responses(400, 403, 404, 409)},
    )
    def patch(self, request, member_id: int):
        member = member_or_404(request, member_id)
        require_owner(user=request.user, account=member.account)
        data = MemberRoleIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            member = members.membership_set_role(
                membership=member, role=data.validated_data["role"], actor=request_actor(request)
            )
        except members.MembershipRefused as exc:
            raise Conflict(str(exc)) from exc
        return Response(MemberOut(member).data)

    @extend_schema(
        operation_id="members_remove",
        tags=["members"],
        summary="Remove a person from the account (owners only; the last owner stays: 409)",
        request=None,
        responses={204: None, **error_responses(403, 404, 409)},
    )
    def delete(self, request, member_id: int):
        member = member_or_404(request, member_id)
        require_owner(user=request.user, account=member.account)
        try:
            members.membership_remove(membership=member, actor=request_actor(request))
        except members.MembershipRefused as exc:
            raise Conflict(str(exc)) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)


class DirectoryRolesIn(serializers.Serializer):
    account = id_of(Account, required=False, help_text="Default: the caller's first account.")
    roles = serializers.DictField(
        child=serializers.ChoiceField(choices=Membership.Role.choices),
        help_text='Directory group name -> role, e.g. {"eng-leads": "admin", "eng": "viewer"}.'
        " The whole map: groups left out map to nothing.",
    )


class DirectoryRolesOut(serializers.Serializer):
    account = serializers.IntegerField()
    roles = serializers.DictField(child=serializers.CharField())


class DirectoryRolesView(APIView):
    """The account's directory roles: the role each directory group (an SSO groups claim,
    a SCIM Group) gives a member (accounts/directory.py)."""

    @extend_schema(
        operation_id="directory_roles_get",
        tags=["members"],
        summary="The account's directory roles (`account`, else the caller's first)",
        parameters=[MemberListIn],
        responses={200: DirectoryRolesOut, **error_responses(400, 404)},
    )
    def get(self, request):
        query = MemberListIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        account = account_or_404(request, query.validated_data.get("account"))
        return Response({"account": account.pk, "roles": account.directory_roles})

    @extend_schema(
        operation_id="directory_roles_set",
        tags=["members"],
        summary="Replace the account's directory roles (owners only); provisioned members"
        " take their new roles at once",
        request=DirectoryRolesIn,
        responses={200: DirectoryRolesOut, **error_responses(400, 403, 404)},
    )
    def put(self, request):
        data = DirectoryRolesIn(data=request.data)
        data.is_valid(raise_exception=True)
        account = account_or_404(request, data.validated_data.get("account"))
        require_owner(user=request.user, account=account)
        try:
            directory.directory_roles_set(
                account=account, roles=data.validated_data["roles"], actor=request_actor(request)
            )
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"roles": exc.messages}) from exc
        return Response({"account": account.pk, "roles": account.directory_roles})
