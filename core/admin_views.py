"""What the apps' admin pages share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from django import forms
from django.contrib.admin import display
from django.contrib.admin.utils import flatten_fieldsets
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import IntegerField, Q, QuerySet
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from core.money import AmountInvalid, format_usd, format_usd_exact, parse_usd, usd_places


class ReadOnly:
    """Admin mixin for a record kept by Tollgate itself (a log, a ledger, a job): listed and
    read, never added, changed or deleted by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class CappedCountPaginator(Paginator):
    """Counts at most COUNT_CAP rows: a changelist over millions pages on without counting
    them all (the pages after the cap are reached from the last one's filters)."""

    COUNT_CAP = 10_000
    object_list: QuerySet[Any]  # the admin's changelist pages a QuerySet

    @cached_property
    def count(self) -> int:
        # Unordered: see accounts/api/pagination.py's capped count.
        return self.object_list.order_by()[: self.COUNT_CAP].count()


class LargeTable:
    """Admin mixin for a table that grows with traffic: no full counts, capped page counts,
    and a search that matches `search_fields` exactly, as stored (Django's `=field` compares
    upper-cased values, which no index serves). Pair it with fixed-choice list filters."""

    paginator: ClassVar[type[Paginator]] = CappedCountPaginator
    show_full_result_count = False
    search_fields: ClassVar[list[str] | tuple[str, ...]]  # the ModelAdmin's

    def get_search_results(self, request, queryset, search_term: str):
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q()
        for name in self.search_fields:
            name = name.lstrip("=")
            field = queryset.model._meta.get_field(name)
            if isinstance(getattr(field, "target_field", field), IntegerField):  # a key too
                if not term.isdigit():
                    continue
                match |= Q(**{name: int(term)})
            else:
                match |= Q(**{name: term})
        return (queryset.filter(match) if match else queryset.none()), False


# ---------------------------------------------------------------- dollars


def is_money(name: str) -> bool:
    """Whether a field holds micro-USD (every such field's name says `micro`)."""
    return "micro" in name


def money_label(name: str) -> str:
    """A money field's name as a person reads it: "input_micro_per_mtok" -> "input (USD per 1M
    tokens)", "budget_max_micro" -> "budget max (USD)"."""
    base, unit = name, "USD"
    for suffix, per in (("_per_mtok", "USD per 1M tokens"), ("_per_gb", "USD per GB")):
        if base.endswith(suffix):
            base, unit = base.removesuffix(suffix), per
    base = base.replace("_micro_usd", "").replace("_micro", "").replace("_", " ")
    return f"{base} ({unit})"


def dollars(micro: int | None, places: int | None = None) -> str:
    """An amount for a page: cents (or `places` decimals, from core.money.finest_places),
    with every digit in its tooltip where they differ."""
    if micro is None:
        return "–"
    shown = format_usd(micro, places=places)
    if not abs(micro) % 10 ** (6 - (places or usd_places(micro))):  # no digit hidden
        return shown
    return format_html('<span title="{}">{}</span>', format_usd_exact(micro), shown)


_COLUMNS: dict[tuple[type, str], Callable] = {}


def money_column(model: type, name: str) -> Callable:
    """A list column or read-only field showing `name` in dollars, sorted by the field."""
    key = (model, name)
    if key not in _COLUMNS:

        @display(description=money_label(name), ordering=name)
        def show(obj) -> str:
            return dollars(getattr(obj, name))

        show.__name__ = f"{name}_usd"
        _COLUMNS[key] = show
    return _COLUMNS[key]


class DollarField(forms.CharField):
    """A money input: a person types dollars ("5.00"), the model keeps micro-USD."""

    def __init__(self, *, allow_negative: bool = False, **kwargs) -> None:
        self.allow_negative = allow_negative
        super().__init__(**kwargs)

    def prepare_value(self, value):
        if isinstance(value, int):
            return format_usd_exact(value).replace("$", "").replace(",", "")
        return value

    def to_python(self, value):
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return parse_usd(text, allow_negative=self.allow_negative)
        except AmountInvalid as exc:
            raise ValidationError(str(exc), code="invalid") from None


class Dollars:
    """Admin mixin: every micro-USD field is read and typed in dollars (see core/money.py).

    List columns and read-only fields show cents (all digits in a tooltip); form fields take
    "5.00" as five dollars. Storage stays integer micro-USD.
    """

    def get_list_display(self, request):
        return [
            money_column(self.model, n) if isinstance(n, str) and is_money(n) else n
            for n in super().get_list_display(request)
        ]

    def get_readonly_fields(self, request, obj=None):
        names = list(super().get_readonly_fields(request, obj))
        return names + [
            money_column(self.model, n) for n in names if isinstance(n, str) and is_money(n)
        ]

    def get_fieldsets(self, request, obj=None):
        # A money field shown read-only is shown by its dollars column instead (the name
        # stays in get_readonly_fields, so the form never takes it).
        readonly = set(self.get_readonly_fields(request, obj))
        if obj is not None and not self.has_change_permission(request, obj):
            readonly = None  # a view-only page: every field is read-only
        return [
            (
                title,
                {
                    **options,
                    "fields": [
                        money_column(self.model, n)
                        if isinstance(n, str)
                        and is_money(n)
                        and (readonly is None or n in readonly)
                        else n
                        for n in options["fields"]
                    ],
                },
            )
            for title, options in super().get_fieldsets(request, obj)
        ]

    # The form takes the fields' names only: the dollars columns above are read-only displays.
    # (`fields=None` is Django asking for every form field, to build the fieldsets from.)
    def get_form(self, request, obj=None, change=False, **kwargs):
        if "fields" not in kwargs:
            kwargs["fields"] = flatten_fieldsets(self.get_fieldsets(request, obj))
        kwargs["fields"] = _names(kwargs["fields"])
        return super().get_form(request, obj, change, **kwargs)

    def get_formset(self, request, obj=None, **kwargs):
        if "fields" not in kwargs:
            kwargs["fields"] = flatten_fieldsets(self.get_fieldsets(request, obj))
        kwargs["fields"] = _names(kwargs["fields"])
        return super().get_formset(request, obj, **kwargs)

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if is_money(db_field.name) and db_field.editable:
            return DollarField(
                label=_first_upper(money_label(db_field.name)),
                required=not (db_field.null or db_field.blank),
                help_text=db_field.help_text or "In dollars, e.g. 5.00.",
            )
        return super().formfield_for_dbfield(db_field, request, **kwargs)


def _names(fields: list | None) -> list[str] | None:
    return None if fields is None else [name for name in fields if isinstance(name, str)]


def _first_upper(text: str) -> str:
    return text[:1].upper() + text[1:]  # "USD" stays upper case, unlike str.capitalize


def html_table(
    headers: Sequence[str], rows: Sequence[Sequence], *, empty: str, css_class: str
) -> str:
    """A read-only admin field's table: a header row, then a row of cells per item (`empty`
    in a paragraph when there is none). Every value is escaped."""
    if not rows:
        return format_html("<p>{}</p>", empty)
    head = format_html_join("", '<th scope="col">{}</th>', ((h,) for h in headers))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows),
    )
    return format_html(
        '<table class="{}"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
        css_class,
        head,
        body,
    )
