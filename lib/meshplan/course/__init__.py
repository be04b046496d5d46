"""What the book shows, built on every layer below: the evolution map (``evolution``), the lab page's worked
plans (``lab``), published runs and tables (``published``), figures (``plotting``, ``grid``), the sympy
derivations (``derive``), the TP check bench (``tpbench``), chapter 8's plan checker (``design``) and the memory
estimators the course compares with (``estimators``).
"""
