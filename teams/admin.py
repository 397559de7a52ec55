"""Admin console for teams, membership, API tokens and the audit log (staff only)."""

from __future__ import annotations

from allauth.socialaccount.models import SocialApp, SocialToken
from django.contrib import admin
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AdminUserCreationForm

from core.admin import DeletesOneByOne, ReadOnlyAdmin, when_column
from teams import services
from teams.models import ApiToken, AuditEvent, GroupMapping, Membership, Team, audit_actions
from teams.services import lock_team
from teams.usernames import refuse_lookalike

User = get_user_model()

admin.site.site_header = "Slipway admin console"
admin.site.site_title = "Slipway admin"


# The single sign-on provider comes from SLIPWAY_OIDC_* alone (teams.oidc), and provider tokens
# are not stored: allauth's pages for either would only mislead.
for _model in (SocialApp, SocialToken):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


class UserCreationForm(AdminUserCreationForm):
    def clean_username(self) -> str | None:
        username = super().clean_username()  # None once Django found the name taken (its error says so)
        return refuse_lookalike(username) if username else username


class UserChangeForm(auth_forms.UserChangeForm):
    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        if "username" not in self.changed_data:
            return username  # names already there are left as they are: only a rename is judged
        return refuse_lookalike(username, self.instance.pk)


# Users: Django's pages, with the one look-alike rule on every name they create or change
# (teams.usernames: security review 5 #3, e.g. "aIice" with a capital I beside "alice").
if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class SlipwayUserAdmin(UserAdmin):
    add_form = UserCreationForm
    form = UserChangeForm


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]
    fields = ["user", "role", "source"]
    # Added here means added by hand; a membership's source is switched on its own page (MembershipAdmin).
    readonly_fields = ["source"]


def audit_membership_changes(request, formset, team: Team) -> None:
    """Write one audit event per added, changed or removed membership of a formset just saved."""
    for obj in formset.new_objects:
        services.audit(AuditEvent.Action.MEMBERSHIP_CHANGED, actor=request.user, team=team,
                       target=obj.user.username, change="added", role=obj.role)
    for obj, fields in formset.changed_objects:
        services.audit(AuditEvent.Action.MEMBERSHIP_CHANGED, actor=request.user, team=team,
                       target=obj.user.username, change="changed", role=obj.role, fields=fields)
    for obj in formset.deleted_objects:
        services.audit(AuditEvent.Action.MEMBERSHIP_CHANGED, actor=request.user, team=team,
                       target=obj.user.username, change="removed")


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "namespace", "created"]
    created = when_column("created_at", "created")
    search_fields = ["slug", "name", "namespace"]
    inlines = [MembershipInline]  # quotas adds its quota and budget rows (quotas.admin)
    # The team's own admins set it on the portal's Team page, through the audited service.
    readonly_fields = ["members_may_cancel_teammates_work"]

    def save_model(self, request, obj, form, change):
        if change:
            # The inline quota rows are saved next, in this transaction: hold the team's
            # admission lock first, like every admission does (no deadlock, no decision
            # taken on half-saved quotas).
            lock_team(obj)
        super().save_model(request, obj, form, change)

    def save_formset(self, request, form, formset, change):
        super().save_formset(request, form, formset, change)
        if formset.model is Membership:
            audit_membership_changes(request, formset, form.instance)


@admin.register(Membership)
class MembershipAdmin(DeletesOneByOne):
    list_display = ["team", "user", "role", "source", "created"]
    created = when_column("created_at", "created")
    list_filter = ["role", "source", "team"]
    search_fields = ["team__slug", "user__username"]
    autocomplete_fields = ["user", "team"]

    def get_readonly_fields(self, request, obj=None):
        # A membership added here is added by hand; an existing one may be pinned (set to manual)
        # so sign-in stops changing it, or handed to the provider's groups (docs/sso.md).
        return ["source"] if obj is None else []

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        details = {"role": obj.role, "source": obj.source}
        if change:
            # As the Team page's event says the role it replaced; a membership moved to another person or
            # team also names whom or which it was taken from (they lost the team).
            details["old_role"] = form.initial.get("role")
            if "user" in form.changed_data:
                details["old_user"] = User.objects.filter(pk=form.initial.get("user")).values_list(
                    "username", flat=True).first()
            if "team" in form.changed_data:
                details["old_team"] = Team.objects.filter(pk=form.initial.get("team")).values_list(
                    "slug", flat=True).first()
        services.audit(AuditEvent.Action.MEMBERSHIP_CHANGED, actor=request.user, team=obj.team,
                       target=obj.user.username, change="changed" if change else "added", **details)

    def delete_model(self, request, obj):
        services.audit(AuditEvent.Action.MEMBERSHIP_CHANGED, actor=request.user, team=obj.team,
                       target=obj.user.username, change="removed", role=obj.role)
        super().delete_model(request, obj)

    # "Delete selected" removes people too: each one audited as on its own page.
    delete_related = ("team", "user")


@admin.register(GroupMapping)
class GroupMappingAdmin(DeletesOneByOne):
    """Staff map the identity provider's groups to teams and roles (docs/sso.md); each change audited.

    A change takes effect at each person's next sign-in (teams.sso.sync_memberships); the preview
    page (/admin/sso/preview/) shows what a claims document gets.
    """

    list_display = ["claim_value", "team", "role", "created"]
    created = when_column("created_at", "created")
    list_filter = ["role", "team"]
    search_fields = ["claim_value", "team__slug"]
    autocomplete_fields = ["team"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        services.audit(AuditEvent.Action.GROUP_MAPPING_CHANGED, actor=request.user, team=obj.team,
                       target=obj.claim_value, change="changed" if change else "added", role=obj.role)

    def delete_model(self, request, obj):
        services.audit(AuditEvent.Action.GROUP_MAPPING_CHANGED, actor=request.user, team=obj.team,
                       target=obj.claim_value, change="removed", role=obj.role)
        super().delete_model(request, obj)

    delete_related = ("team",)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created by their owners; staff may only look and revoke."""

    list_display = ["name", "user", "key_prefix", "created", "expires", "revoked", "last_used"]
    created = when_column("created_at", "created")
    expires = when_column("expires_at", "expires")
    revoked = when_column("revoked_at", "revoked")
    last_used = when_column("last_used_at", "last used")
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "key_prefix"]
    readonly_fields = ["user", "name", "key_prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    # permissions: without them the action is offered to, and run for, whoever may view the list.
    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        for token in queryset:
            services.revoke_api_token(request.user, token, ip=services.client_ip(request))


class ActionFilter(admin.SimpleListFilter):
    """The audit log's actions by label: the core ones and those the kinds declare (no ``choices`` on the column)."""

    title = "action"
    parameter_name = "action"

    def lookups(self, request, model_admin):
        return sorted(audit_actions().items(), key=lambda item: item[1])

    def queryset(self, request, queryset):
        return queryset.filter(action=self.value()) if self.value() else queryset


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Read-only: the audit log is append-only."""

    list_display = ["at", "actor_name", "action_label", "team", "target", "ip_address"]
    at = when_column("created_at", "at", "seconds")
    list_filter = [ActionFilter, "team"]
    search_fields = ["actor_name", "target"]
    date_hierarchy = "created_at"

    @admin.display(description="action", ordering="action")
    def action_label(self, obj: AuditEvent) -> str:
        return obj.get_action_display()
