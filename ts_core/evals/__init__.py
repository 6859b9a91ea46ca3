"""evals"""
