/* Half of a cycle the call-graph check must find (tests/callgraph.py). */
int b_twice(int x);

int a_once(int x)
{
    return x > 0 ? b_twice(x - 1) : 0;
}
