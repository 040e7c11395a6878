"""Beyond the survey: attention as it is computed and used after 2021.

One module per chapter of the book's last part ("Beyond the survey"). The
conventions are the book's: batch-first rows ``(..., n, d)``, boolean masks
with ``True`` = may attend, fully-masked query rows give a zero context.
"""
