"""What kata tests are written with (imported in the kata process, with torch).

spec       KataSpec (what a kata is judged by), Case and CaseTable (named edge cases that
           run every time, plus seeded random draws), dtype parametrisation
tolerances (rtol, atol) per dtype for one operation
checks     comparisons whose failure messages say what was called, what came back and
           what was expected; inputs left unchanged; devices; Inconclusive
inputs     seeded inputs: normals drawn in float64, masks of every kind
attention  the case table and custom scales shared by the attention function katas
modules    the shared path of the module katas (after PyTorch's ModuleInfo): build the
           learner's module and PyTorch's with the same random parameters, call both, compare
diagnosis  on a failure: which known slip gives the same wrong result, what pattern it shows
"""
