

outputoutput""
GraphModule