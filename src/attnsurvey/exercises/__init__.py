"""Self-check functions for the book's exercises (one module per chapter or part).

Each ``check_*`` function takes the reader's answer (a value or a function),
raises ``AssertionError`` with a hint if it is wrong, and prints a short
confirmation if it is right. The tests import them to make sure each check
rejects a plausible wrong answer and accepts the worked solution.
"""
