"""Web acquisition: scrape, search and crawl pages, behind the same keys, budgets and books as
model requests (the second outbound path of the seeds; webfetch/ holds the fetcher and jobs)."""
