from django.urls import path

from billing.api import archives, heads, receipts, tag_budgets, views

urlpatterns = [
    path("accounts/<int:account_id>/wallet", views.WalletView.as_view()),
    path("accounts/<int:account_id>/ledger", views.LedgerView.as_view()),
    path("groups/<int:group_id>/spend", views.GroupSpendView.as_view()),
    path("tag-budgets", tag_budgets.TagBudgetListView.as_view()),
    path("tag-budgets/<int:tag_budget_id>", tag_budgets.TagBudgetDetailView.as_view()),
    # Receipts: the fixed routes before the request id they would otherwise be taken for.
    path("receipts", receipts.ReceiptListView.as_view()),
    path("receipts/keys", receipts.ReceiptKeysView.as_view()),
    path("receipts/head", heads.ReceiptHeadView.as_view()),
    path("receipts/statement", receipts.StatementView.as_view()),
    path("receipts/archives", archives.ArchiveListView.as_view()),
    path("receipts/archives/<str:period>", archives.ArchiveFileView.as_view()),
    path("receipts/<str:request_id>", receipts.RequestReceiptsView.as_view()),
]
