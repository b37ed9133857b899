"""The review side: reviewers' decisions (:mod:`~streamdedup.review.decisions`) and the review console
(:mod:`~streamdedup.review.console`)."""
